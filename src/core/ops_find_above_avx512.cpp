// ops::find_above with AVX-512: 64 values a step (four compares or-ed into
// one test), then the first set bit of the step's masks.
#include <immintrin.h>

#include "core/ops_impl.h"

namespace shardlm::ops::avx512 {

int64_t find_above(const float* x, int64_t n, float floor) {
  const __m512 f = _mm512_set1_ps(floor);
  const auto above = [&](int64_t i, __mmask16 valid) {
    return _mm512_mask_cmp_ps_mask(valid, _mm512_maskz_loadu_ps(valid, x + i), f, _CMP_GT_OQ);  // false for NaN
  };
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __mmask16 m0 = above(i, 0xffff), m1 = above(i + 16, 0xffff), m2 = above(i + 32, 0xffff),
                    m3 = above(i + 48, 0xffff);
    if ((m0 | m1 | m2 | m3) == 0) continue;
    const uint64_t bits = uint64_t(m0) | uint64_t(m1) << 16 | uint64_t(m2) << 32 | uint64_t(m3) << 48;
    return i + __builtin_ctzll(bits);
  }
  for (; i < n; i += 16) {
    const __mmask16 valid = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __mmask16 m = above(i, valid);
    if (m) return i + __builtin_ctz(m);
  }
  return n;
}

}  // namespace shardlm::ops::avx512
