// F16 and BF16 weights widened to f32, 16 at a time, for the AVX-512 float
// kernels: the decode rows (matmul_avx512.cpp) and the blocked tiles
// (matmul_float_gemm_avx512.cpp). The masked form reads only the first
// lanes of m. Include only from files compiled with AVX-512 flags; internal
// linkage (see matmul_avx2_common.h).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace shardlm::matmul_impl {
namespace {

struct F16x16 {
  static constexpr size_t kBytes = 2;
  static __m512 load(const uint8_t* p) { return convert(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const uint8_t* p, __mmask16 m) { return convert(_mm256_maskz_loadu_epi16(m, p)); }
  static __m512 convert(__m256i h) { return _mm512_cvtph_ps(h); }
};
struct BF16x16 {
  static constexpr size_t kBytes = 2;
  static __m512 load(const uint8_t* p) { return convert(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const uint8_t* p, __mmask16 m) { return convert(_mm256_maskz_loadu_epi16(m, p)); }
  static __m512 convert(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
};

}  // namespace
}  // namespace shardlm::matmul_impl
