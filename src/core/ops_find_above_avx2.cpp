// ops::find_above with AVX2: 32 values a step (four compares or-ed into one
// test), then the first set bit of the step's sign masks.
#include <immintrin.h>

#include "core/ops_impl.h"

namespace shardlm::ops::avx2 {

int64_t find_above(const float* x, int64_t n, float floor) {
  const __m256 f = _mm256_set1_ps(floor);
  const auto above = [&](int64_t i) {
    return uint32_t(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), f, _CMP_GT_OQ)));  // false for NaN
  };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const uint32_t bits = above(i) | above(i + 8) << 8 | above(i + 16) << 16 | above(i + 24) << 24;
    if (bits) return i + __builtin_ctz(bits);
  }
  for (; i + 8 <= n; i += 8)
    if (const uint32_t bits = above(i)) return i + __builtin_ctz(bits);
  for (; i < n; ++i)
    if (x[i] > floor) return i;
  return n;
}

}  // namespace shardlm::ops::avx2
