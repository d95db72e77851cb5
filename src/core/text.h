// Small text helpers shared by the readers of hand-written input (node
// lists, hostfiles, key files, chat lines) and by serve's reading of replies.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

namespace shardlm {

// Spaces, tabs and carriage returns; and those with line ends.
constexpr std::string_view kBlanks = " \t\r", kBlanksAndLineEnds = " \t\r\n";

// `s` without the characters of `chars` at its start / at its end.
inline std::string_view without_leading(std::string_view s, std::string_view chars) {
  const size_t first = s.find_first_not_of(chars);
  return first == std::string_view::npos ? std::string_view() : s.substr(first);
}
inline std::string_view without_trailing(std::string_view s, std::string_view chars) {
  const size_t last = s.find_last_not_of(chars);
  return last == std::string_view::npos ? std::string_view() : s.substr(0, last + 1);
}

inline std::string_view without_ends(std::string_view s, std::string_view chars) {
  return without_trailing(without_leading(s, chars), chars);
}

// `s` without the spaces, tabs and carriage returns at its ends.
inline std::string_view strip_blanks(std::string_view s) { return without_ends(s, kBlanks); }

// The length of the longest end of `s` that is a proper start of `tag`: text
// a reader holds back while it may still become `tag`.
inline size_t partial_start_at_end(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.empty() ? 0 : tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

// Characters of UTF-8 text: its bytes that do not continue a character (a
// piece that ends or begins inside one counts the characters it begins).
inline int64_t utf8_chars(std::string_view s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace shardlm
