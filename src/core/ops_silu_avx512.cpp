// silu and swiglu on 16 lanes: the AVX2 ops' arithmetic (x / (1 + e^-x), then
// × up), so the same bits at twice the lanes. Between the gate/up and down
// matrices of every layer this runs on one thread while the others wait.
// Compiled with AVX-512 flags; internal linkage (see matmul_avx512.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "core/ops_exp_avx512.h"
#include "core/ops_impl.h"

namespace shardlm::ops::avx512 {
namespace {

inline __m512 silu_ps(__m512 x) {
  const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.f), e));
}

// out = f(a, b) over n lanes, the last vector masked.
template <class F>
void binary(const float* a, const float* b, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, f(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

}  // namespace

void silu(const float* x, float* out, int64_t n) {
  binary(x, x, out, n, [](__m512 v, __m512) { return silu_ps(v); });
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  binary(gate, up, out, n, [](__m512 g, __m512 u) { return _mm512_mul_ps(silu_ps(g), u); });
}

}  // namespace shardlm::ops::avx512

#pragma GCC diagnostic pop
