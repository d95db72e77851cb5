// ops::argmax with AVX-512: four vectors of lanes, each lane keeping its
// first maximum (a strict compare) and where it was; the answer is the
// lowest position among the lanes that hold the overall maximum, which is
// the first maximum of the whole array (the reference's index).
#include <immintrin.h>

#include <climits>
#include <limits>

#include "core/ops_impl.h"

// GCC 12's AVX-512 reductions and casts start from an undefined vector (as in ops_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace shardlm::ops::avx512 {

int64_t argmax(const float* x, int64_t n) {
  if (n <= 0) return 0;
  if (n > INT_MAX - 64) return ref::argmax(x, n);  // positions live in 32-bit lanes
  constexpr int kVecs = 4, kLanes = 16;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 best[kVecs];
  __m512i at[kVecs];
  // A lane that never sees a value above -inf keeps a position below 64:
  // when nothing is above -inf the lowest of them, 0, is the answer.
  for (int k = 0; k < kVecs; ++k) {
    best[k] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    at[k] = _mm512_add_epi32(lane, _mm512_set1_epi32(k * kLanes));
  }
  int64_t i = 0;
  for (; i + kVecs * kLanes <= n; i += kVecs * kLanes) {
    for (int k = 0; k < kVecs; ++k) {
      const __m512 v = _mm512_loadu_ps(x + i + k * kLanes);
      const __mmask16 above = _mm512_cmp_ps_mask(v, best[k], _CMP_GT_OQ);  // false for NaN
      best[k] = _mm512_mask_mov_ps(best[k], above, v);
      at[k] = _mm512_mask_mov_epi32(at[k], above, _mm512_add_epi32(lane, _mm512_set1_epi32(int(i) + k * kLanes)));
    }
  }
  for (; i < n; i += kLanes) {
    const __mmask16 valid = n - i >= kLanes ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(valid, x + i);
    const __mmask16 above = _mm512_mask_cmp_ps_mask(valid, v, best[0], _CMP_GT_OQ);
    best[0] = _mm512_mask_mov_ps(best[0], above, v);
    at[0] = _mm512_mask_mov_epi32(at[0], above, _mm512_add_epi32(lane, _mm512_set1_epi32(int(i))));
  }
  __m512 top = best[0];
  for (int k = 1; k < kVecs; ++k) top = _mm512_max_ps(top, best[k]);
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(top));
  __m512i first = _mm512_set1_epi32(INT_MAX);
  for (int k = 0; k < kVecs; ++k)
    first = _mm512_mask_min_epi32(first, _mm512_cmp_ps_mask(best[k], max, _CMP_EQ_OQ), first, at[k]);
  return _mm512_reduce_min_epi32(first);
}

}  // namespace shardlm::ops::avx512
