// UTF-8 helpers shared by the tokenizers, with llama.cpp's tolerance for bad
// input: an invalid byte becomes U+FFFD instead of an error, so any prompt
// tokenizes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardlm::text {

// Length of the UTF-8 sequence a lead byte announces (1 for stray bytes).
inline size_t utf8_sequence_length(uint8_t lead) {
  static constexpr uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return by_high_nibble[lead >> 4];
}

// Code points of `s`; each byte that does not start a well-formed sequence
// (lead + continuation bytes) yields U+FFFD. Overlong forms are accepted, as
// llama.cpp does.
std::vector<uint32_t> decode_utf8_lenient(std::string_view s);

void append_utf8(std::string& out, uint32_t cp);

// Byte count of the longest prefix of `s` made only of complete, valid UTF-8
// characters, with `incomplete_tail` set when the rest could still become a
// valid character once more bytes arrive.
size_t complete_utf8_prefix(std::string_view s, bool& incomplete_tail);

// GPT-2 byte-level BPE alphabet: every byte maps to one printable code point.
const std::string& byte_to_bpe_char(uint8_t byte);
// Inverse; returns -1 for code points outside the alphabet.
int bpe_char_to_byte(uint32_t cp);

}  // namespace shardlm::text
