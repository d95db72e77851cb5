#include "tokenizer/unicode_text.h"

#include <array>

namespace shardlm::text {

std::vector<uint32_t> decode_utf8_lenient(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  auto continuation = [&](size_t k) { return i + k < s.size() && (uint8_t(s[i + k]) & 0xC0) == 0x80; };
  while (i < s.size()) {
    const uint8_t b = uint8_t(s[i]);
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && continuation(1)) {
      out.push_back(uint32_t(b & 0x1F) << 6 | (uint8_t(s[i + 1]) & 0x3F));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && continuation(1) && continuation(2)) {
      out.push_back(uint32_t(b & 0x0F) << 12 | uint32_t(uint8_t(s[i + 1]) & 0x3F) << 6 | (uint8_t(s[i + 2]) & 0x3F));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && continuation(1) && continuation(2) && continuation(3)) {
      out.push_back(uint32_t(b & 0x07) << 18 | uint32_t(uint8_t(s[i + 1]) & 0x3F) << 12 |
                    uint32_t(uint8_t(s[i + 2]) & 0x3F) << 6 | (uint8_t(s[i + 3]) & 0x3F));
      i += 4;
    } else {
      out.push_back(0xFFFD);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | ((cp >> 18) & 0x07));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

size_t complete_utf8_prefix(std::string_view s, bool& incomplete_tail) {
  incomplete_tail = false;
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = uint8_t(s[i]);
    size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || (n == 2 && b < 0xC2) || (n == 4 && b > 0xF4)) return i;  // cannot start a character
    size_t k = 1;
    for (; k < n && i + k < s.size(); ++k) {
      const uint8_t c = uint8_t(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      // Second-byte limits that rule out overlong forms, surrogates and > U+10FFFF.
      if (k == 1 && ((b == 0xE0 && c < 0xA0) || (b == 0xED && c > 0x9F) || (b == 0xF0 && c < 0x90) ||
                     (b == 0xF4 && c > 0x8F)))
        return i;
    }
    if (k < n) {
      incomplete_tail = true;
      return i;
    }
    i += n;
  }
  return i;
}

namespace {

struct ByteAlphabet {
  std::array<std::string, 256> to_char;
  std::array<int16_t, 324> to_byte;  // code points used are all < 324
  ByteAlphabet() {
    to_byte.fill(-1);
    // Printable bytes keep their own code point; the others are moved, in
    // byte order, to U+0100 onwards (the GPT-2 convention).
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable(b) ? uint32_t(b) : next++;
      append_utf8(to_char[b], cp);
      to_byte[cp] = int16_t(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

const std::string& byte_to_bpe_char(uint8_t byte) { return alphabet().to_char[byte]; }

int bpe_char_to_byte(uint32_t cp) { return cp < alphabet().to_byte.size() ? alphabet().to_byte[cp] : -1; }

}  // namespace shardlm::text
