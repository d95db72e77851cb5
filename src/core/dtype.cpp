#include "core/dtype.h"

#include <array>
#include <cctype>
#include <fmt/format.h>
#include <string>

#include "core/error.h"

namespace shardlm {
namespace {

struct Entry {
  uint32_t id;
  DTypeTraits t;
};

// Sizes of the types this engine does not compute with are still listed so
// that files holding them can be validated and inspected.
constexpr std::array kTable = {
    Entry{0, {"F32", 1, 4, true}},          Entry{1, {"F16", 1, 2, true}},
    Entry{2, {"Q4_0", 32, 18, true}},       Entry{3, {"Q4_1", 32, 20, true}},
    Entry{6, {"Q5_0", 32, 22, true}},       Entry{7, {"Q5_1", 32, 24, true}},
    Entry{8, {"Q8_0", 32, 34, true}},       Entry{9, {"Q8_1", 32, 36, false}},
    Entry{10, {"Q2_K", 256, 84, true}},     Entry{11, {"Q3_K", 256, 110, true}},
    Entry{12, {"Q4_K", 256, 144, true}},    Entry{13, {"Q5_K", 256, 176, true}},
    Entry{14, {"Q6_K", 256, 210, true}},    Entry{15, {"Q8_K", 256, 292, false}},
    Entry{16, {"IQ2_XXS", 256, 66, false}}, Entry{17, {"IQ2_XS", 256, 74, false}},
    Entry{18, {"IQ3_XXS", 256, 98, false}}, Entry{19, {"IQ1_S", 256, 50, false}},
    Entry{20, {"IQ4_NL", 32, 18, false}},   Entry{21, {"IQ3_S", 256, 110, false}},
    Entry{22, {"IQ2_S", 256, 82, false}},   Entry{23, {"IQ4_XS", 256, 136, false}},
    Entry{24, {"I8", 1, 1, false}},         Entry{25, {"I16", 1, 2, false}},
    Entry{26, {"I32", 1, 4, false}},        Entry{27, {"I64", 1, 8, false}},
    Entry{28, {"F64", 1, 8, false}},        Entry{29, {"IQ1_M", 256, 56, false}},
    Entry{30, {"BF16", 1, 2, true}},        Entry{34, {"TQ1_0", 256, 54, false}},
    Entry{35, {"TQ2_0", 256, 66, false}},   Entry{39, {"MXFP4", 32, 17, false}},
};

// Each id's entry in kTable (-1: none): traits() is a lookup, not a search
// of the table, since hot paths ask for it (row_bytes, the kernels' setup;
// the search showed in a 1B Q4_K_M decode's profile at 0.3 % of the samples).
constexpr auto kEntryOfId = [] {
  std::array<int8_t, 40> entry{};
  entry.fill(-1);
  for (size_t i = 0; i < kTable.size(); ++i) entry[kTable[i].id] = int8_t(i);
  return entry;
}();

const DTypeTraits* find(uint32_t id) {
  if (id >= kEntryOfId.size() || kEntryOfId[id] < 0) return nullptr;
  return &kTable[size_t(kEntryOfId[id])].t;
}

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t id) {
  if (const DTypeTraits* t = find(id)) return *t;
  return std::nullopt;
}

const DTypeTraits& traits(DType t) {
  if (const DTypeTraits* found = find(uint32_t(t))) return *found;
  throw Error(fmt::format("unknown tensor type id {}", uint32_t(t)));
}

std::string_view dtype_name(DType t) { return traits(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string upper(name);
  for (auto& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& e : kTable) {
    std::string n(e.t.name);
    for (auto& c : n) c = char(std::toupper(static_cast<unsigned char>(c)));
    if (n == upper) return DType(e.id);
  }
  return std::nullopt;
}

float f16_to_f32(f16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    // NaN comes out quiet, as F16C makes it.
    bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

f16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) {  // inf or nan
    // NaN: quiet it and keep the top payload bits, as F16C does.
    return f16_t(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
  }
  if (absx >= 0x477ff000) return f16_t(sign | 0x7c00);  // rounds to >= 65520: inf
  if (absx < 0x38800000) {                              // result is subnormal or zero
    if (absx < 0x33000000) return f16_t(sign);          // < 2^-25: rounds to 0
    const uint32_t e = absx >> 23;  // 102..112
    const uint32_t m = (absx & 0x7fffff) | 0x800000;
    const uint32_t drop = 126 - e;  // value in units of 2^-24 is m >> drop
    uint32_t r = m >> drop;
    const uint32_t rem = m & ((1u << drop) - 1);
    const uint32_t half = 1u << (drop - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return f16_t(sign | r);
  }
  uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
  const uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return f16_t(sign | r);
}

bf16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return bf16_t((u >> 16) | 64);  // quiet NaN
  return bf16_t((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

}  // namespace shardlm
