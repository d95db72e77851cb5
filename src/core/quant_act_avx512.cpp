// The activation quantizers (Q8_32 for the 32-element block types, Q8_K for
// the K-quants) on AVX-512, byte-identical to the reference: max|x| exactly,
// one IEEE division each for d and 127/max|x|, x·(127/max|x|) rounded to
// nearest even. Before every matrix of a decode step one thread runs this
// while the others wait. Block by block, a Q8_32 block's scalar chain (its
// maximum, divisions, code sum and f16 round trip) bounded the AVX2 and a
// first AVX-512 version alike at ~38 cycles a block (8192 columns in 2.7 µs
// on a Xeon with AMX); here 16 blocks go at once, their maxima and code sums
// reduced together (simd512::reduce16) and their scales computed in one
// vector (docs/BENCHMARKS.md, thirty-second session).
// Compiled with AVX-512 flags; internal linkage (see matmul_avx512.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/matmul_kernels.h"
#include "core/reduce16_avx512.h"

namespace shardlm::matmul_impl {
namespace {

inline __m512 abs_ps(__m512 v) { return _mm512_andnot_ps(_mm512_set1_ps(-0.0f), v); }

// 127 / max|x| per lane, 0 where the maximum is 0 (an all-zero block), as
// the reference computes it.
inline __m512 inverse_scales(__m512 amax) {
  return _mm512_maskz_div_ps(_mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ), _mm512_set1_ps(127.0f), amax);
}

// The codes of 16 values at `id`, stored as bytes; returned as 32-bit
// integers for the sums (|code| ≤ 127, so narrowing never saturates).
inline __m512i codes16(const float* x, __m512 id, int8_t* q) {
  const __m512i c = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(c));
  return c;
}

inline __m512 as_ps(__m512i v) { return _mm512_castsi512_ps(v); }

// Sixteen Q8_32 blocks from 512 values.
void quantize16_q8_32(const float* x, block_q8_32* out) {
  __m512 m[16];
  for (int b = 0; b < 16; ++b)
    m[b] = _mm512_max_ps(abs_ps(_mm512_loadu_ps(x + 32 * b)), abs_ps(_mm512_loadu_ps(x + 32 * b + 16)));
  const __m512 amax = simd512::reduce16(m, simd512::max_ps);
  alignas(64) float id[16];
  _mm512_store_ps(id, inverse_scales(amax));
  __m512 sums[16];
  for (int b = 0; b < 16; ++b) {
    const __m512 idb = _mm512_set1_ps(id[b]);
    const __m512i lo = codes16(x + 32 * b, idb, out[b].qs), hi = codes16(x + 32 * b + 16, idb, out[b].qs + 16);
    sums[b] = as_ps(_mm512_add_epi32(lo, hi));
  }
  const __m512i sum = _mm512_castps_si512(simd512::reduce16(sums, simd512::add_epi32_bits));
  const __m512 sumf = _mm512_cvtepi32_ps(sum);  // exact: |sum| ≤ 32 · 127
  const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  // The scales to f16 and back (round_scale_to_f16's nearest-even rounding).
  const __m512 d16 = _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
  const __m512 s16 = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_mul_ps(d, sumf), _MM_FROUND_TO_NEAREST_INT));
  alignas(64) float dv[16], dsv[16], sv[16];
  alignas(64) int32_t m8[16];
  _mm512_store_ps(dv, d16);
  _mm512_store_ps(dsv, _mm512_mul_ps(d16, sumf));  // exact: 11-bit scale × 12-bit sum
  _mm512_store_ps(sv, s16);
  _mm512_store_si512(m8, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-8)));
  for (int b = 0; b < 16; ++b) {
    out[b].d = dv[b];
    out[b].ds = dsv[b];
    out[b].s_f16 = sv[b];
    out[b].minus8_sum = m8[b];
  }
}

}  // namespace

void quantize_act_q8_32_avx512(const float* x, block_q8_32* out, int64_t cols) {
  const int64_t nb = cols / 32, whole = nb / 16 * 16;
  for (int64_t b = 0; b < whole; b += 16) quantize16_q8_32(x + 32 * b, out + b);
  if (whole == nb) return;
  // The last blocks through zero padding (a zero block's codes and scales are 0).
  alignas(64) float padded[512] = {};
  block_q8_32 tail[16];
  std::copy(x + 32 * whole, x + 32 * nb, padded);
  quantize16_q8_32(padded, tail);
  std::memcpy(out + whole, tail, size_t(nb - whole) * sizeof(block_q8_32));
}

void quantize_act_q8_k_avx512(const float* x, block_q8_K* out, int64_t cols) {
  constexpr int kVecs = QK_K / 16;
  static_assert(kVecs == 16, "one 16-element sum per vector");
  for (int64_t b = 0; b < cols / QK_K; ++b) {
    const float* xb = x + b * QK_K;
    __m512 m = abs_ps(_mm512_loadu_ps(xb));
    for (int v = 1; v < kVecs; ++v) m = _mm512_max_ps(m, abs_ps(_mm512_loadu_ps(xb + 16 * v)));
    const float amax = _mm512_reduce_max_ps(m);
    out[b].d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    __m512 codes[kVecs];
    for (int v = 0; v < kVecs; ++v) codes[v] = as_ps(codes16(xb + 16 * v, id, out[b].qs + 16 * v));
    const __m512i bsums = _mm512_castps_si512(simd512::reduce16(codes, simd512::add_epi32_bits));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].bsums), _mm512_cvtepi32_epi16(bsums));
  }
}

}  // namespace shardlm::matmul_impl

#pragma GCC diagnostic pop
