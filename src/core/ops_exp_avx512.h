// e^x on 16 lanes, shared by the AVX-512 ops (include only from files
// compiled with AVX-512 flags). The reduction and series are the AVX2
// exp_ps's (core/ops_exp_avx2.h) and vscalefps applies 2^n exactly where
// AVX2 multiplies by two halves of it, so both give the same bits.
#pragma once

#include <immintrin.h>

#include <limits>

namespace shardlm::ops::avx512 {

// e^x for x in [-87.33, 88.72]: x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split in
// two so r keeps its digits), e^r by its Taylor series to degree 7, then
// scaled by 2^n.
inline __m512 exp_in_range(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);  // ln2 high part, exact in 16 bits
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);        // ln2 low part
  __m512 p = _mm512_set1_ps(1.f / 5040.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// e^x for x ≤ 0; below -87.33 (also -inf) the result is 0.
inline __m512 exp_nonpositive(__m512 x) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33f), _CMP_LT_OQ);
  return _mm512_maskz_mov_ps(__mmask16(~tiny), exp_in_range(_mm512_max_ps(x, _mm512_set1_ps(-87.33f))));
}

// e^x; below -87.33 the result is 0 (also for -inf), above 88.72 it is +inf.
inline __m512 exp_ps(__m512 x) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33f), _CMP_LT_OQ);
  const __mmask16 huge = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72f), _CMP_GT_OQ);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33f)), _mm512_set1_ps(88.72f));
  const __m512 e = _mm512_maskz_mov_ps(__mmask16(~tiny), exp_in_range(xc));
  return _mm512_mask_mov_ps(e, huge, _mm512_set1_ps(std::numeric_limits<float>::infinity()));
}

}  // namespace shardlm::ops::avx512
