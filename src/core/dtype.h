// Tensor element types, numbered as in GGUF/ggml so that a type id read from a
// file is a DType directly. Block layouts below are byte-exact with GGUF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace shardlm {

enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21,
  IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
  IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct DTypeTraits {
  std::string_view name;
  int64_t block_elems;   // elements per block (1 for plain types)
  size_t block_bytes;    // bytes per block
  bool compute;          // this engine can dequantize it / multiply with it
};

// Traits of a known type id, or nullopt for an id no GGUF writer uses.
std::optional<DTypeTraits> dtype_traits(uint32_t id);
const DTypeTraits& traits(DType t);  // t must be known
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);  // "Q4_0", "f16", ... (case-insensitive)

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(DType t, int64_t n) {
  const auto& tr = traits(t);
  return size_t(n / tr.block_elems) * tr.block_bytes;
}

// ---- half precision --------------------------------------------------------
using f16_t = uint16_t;
using bf16_t = uint16_t;

float f16_to_f32(f16_t h);
f16_t f32_to_f16(float f);  // round to nearest even, as F16C does
inline float bf16_to_f32(bf16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bf16_t f32_to_bf16(float f);  // round to nearest even; NaN stays NaN (as ggml)

// ---- block layouts (GGUF byte-exact) ---------------------------------------
constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

#pragma pack(push, 1)
struct block_q4_0 { f16_t d; uint8_t qs[QK4_0 / 2]; };
struct block_q4_1 { f16_t d; f16_t m; uint8_t qs[QK4_1 / 2]; };
struct block_q5_0 { f16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct block_q5_1 { f16_t d; f16_t m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q8_0 { f16_t d; int8_t qs[QK8_0]; };
struct block_q8_1 { f16_t d; f16_t s; int8_t qs[QK8_1]; };  // s = d * sum(qs)
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; f16_t d; f16_t dmin; };
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; f16_t d; };
struct block_q4_K { f16_t d; f16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { f16_t d; f16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; f16_t d; };
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
#pragma pack(pop)

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34 && sizeof(block_q8_1) == 36);
static_assert(sizeof(block_q2_K) == 84 && sizeof(block_q3_K) == 110);
static_assert(sizeof(block_q4_K) == 144 && sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292);

}  // namespace shardlm
