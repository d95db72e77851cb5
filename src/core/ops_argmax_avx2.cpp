// ops::argmax with AVX2: as core/ops_argmax_avx512.cpp, in 8-lane vectors
// (each lane keeps its first maximum and its position; the lowest position
// among the lanes holding the overall maximum is the answer).
#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <limits>

#include "core/ops_impl.h"

namespace shardlm::ops::avx2 {

int64_t argmax(const float* x, int64_t n) {
  if (n <= 0) return 0;
  if (n > INT_MAX - 32) return ref::argmax(x, n);  // positions live in 32-bit lanes
  constexpr int kVecs = 4, kLanes = 8;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 minus_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 best[kVecs];
  __m256i at[kVecs];
  // A lane that never sees a value above -inf keeps a position below 32:
  // when nothing is above -inf the lowest of them, 0, is the answer.
  for (int k = 0; k < kVecs; ++k) {
    best[k] = minus_inf;
    at[k] = _mm256_add_epi32(lane, _mm256_set1_epi32(k * kLanes));
  }
  const auto keep_above = [&](int k, __m256 v, int64_t pos) {
    const __m256 above = _mm256_cmp_ps(v, best[k], _CMP_GT_OQ);  // false for NaN
    best[k] = _mm256_blendv_ps(best[k], v, above);
    const __m256i here = _mm256_add_epi32(lane, _mm256_set1_epi32(int(pos)));
    at[k] = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(at[k]), _mm256_castsi256_ps(here), above));
  };
  int64_t i = 0;
  for (; i + kVecs * kLanes <= n; i += kVecs * kLanes)
    for (int k = 0; k < kVecs; ++k) keep_above(k, _mm256_loadu_ps(x + i + k * kLanes), i + k * kLanes);
  for (; i < n; i += kLanes) {
    const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::min<int64_t>(n - i, kLanes))), lane);
    // Lanes past the end read as -inf, which is never above a lane's best.
    keep_above(0, _mm256_blendv_ps(minus_inf, _mm256_maskload_ps(x + i, valid), _mm256_castsi256_ps(valid)), i);
  }
  alignas(32) float values[kVecs * kLanes];
  alignas(32) int32_t positions[kVecs * kLanes];
  for (int k = 0; k < kVecs; ++k) {
    _mm256_store_ps(values + k * kLanes, best[k]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(positions + k * kLanes), at[k]);
  }
  const float max = *std::max_element(values, values + kVecs * kLanes);
  int32_t first = INT_MAX;
  for (int j = 0; j < kVecs * kLanes; ++j)
    if (values[j] == max) first = std::min(first, positions[j]);
  return first;
}

}  // namespace shardlm::ops::avx2
