// Sixteen horizontal reductions at once on AVX-512: lane k of the result is
// x[k]'s sixteen lanes combined by `op`, in 15 shuffle-and-combine steps
// where sixteen separate reductions would take 64 (include only from files
// compiled with AVX-512 flags).
#pragma once

#include <immintrin.h>

namespace shardlm::simd512 {

// Per 128-bit chunk, the pairwise partial results of two inputs interleaved,
// then of four; then across chunks. The result's chunk m holds the results
// of x[4m .. 4m + 3], in order. `op` combines two vectors lane by lane.
template <class Op>
inline __attribute__((always_inline)) __m512 reduce16(const __m512 (&x)[16], Op op) {
  __m512 pair[8], quad[4];
  for (int j = 0; j < 8; ++j)
    pair[j] = op(_mm512_unpacklo_ps(x[2 * j], x[2 * j + 1]), _mm512_unpackhi_ps(x[2 * j], x[2 * j + 1]));
  for (int j = 0; j < 4; ++j) {
    const __m512d a = _mm512_castps_pd(pair[2 * j]), b = _mm512_castps_pd(pair[2 * j + 1]);
    quad[j] = op(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // quad[j]'s chunk k: chunk k's partial results of x[4j .. 4j + 3].
  const __m512 h01 = op(_mm512_shuffle_f32x4(quad[0], quad[1], 0x88), _mm512_shuffle_f32x4(quad[0], quad[1], 0xdd));
  const __m512 h23 = op(_mm512_shuffle_f32x4(quad[2], quad[3], 0x88), _mm512_shuffle_f32x4(quad[2], quad[3], 0xdd));
  return op(_mm512_shuffle_f32x4(h01, h23, 0x88), _mm512_shuffle_f32x4(h01, h23, 0xdd));
}

inline __m512 add_ps(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512 max_ps(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
// Adds 32-bit integers held in float vectors' bits.
inline __m512 add_epi32_bits(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

}  // namespace shardlm::simd512
