// e^x on 16 lanes, shared by the AVX-512 ops (include only from files
// compiled with AVX-512 flags). The reduction and series are the AVX2
// exp_ps's (core/ops_exp_series.h) and vscalefps applies 2^n exactly where
// AVX2 multiplies by two halves of it, so both give the same bits.
#pragma once

#include <immintrin.h>

#include <limits>

#include "core/ops_exp_series.h"

namespace shardlm::ops::avx512 {

// e^x for x in [kMin, kMax] (core/ops_exp_series.h), scaled by 2^n.
inline __m512 exp_in_range(__m512 x) {
  namespace e = exp_series;
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(e::kLog2e)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(e::kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(e::kLn2Low), r);
  __m512 p = _mm512_set1_ps(e::kTerms[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(e::kTerms[i]));
  return _mm512_scalef_ps(p, n);
}

// e^x for x ≤ 0; below kMin (also -inf) the result is 0.
inline __m512 exp_nonpositive(__m512 x) {
  namespace e = exp_series;
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(e::kMin), _CMP_LT_OQ);
  return _mm512_maskz_mov_ps(__mmask16(~tiny), exp_in_range(_mm512_max_ps(x, _mm512_set1_ps(e::kMin))));
}

// e^x; below kMin the result is 0 (also for -inf), above kMax it is +inf.
inline __m512 exp_ps(__m512 x) {
  namespace e = exp_series;
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(e::kMin), _CMP_LT_OQ);
  const __mmask16 huge = _mm512_cmp_ps_mask(x, _mm512_set1_ps(e::kMax), _CMP_GT_OQ);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(e::kMin)), _mm512_set1_ps(e::kMax));
  const __m512 value = _mm512_maskz_mov_ps(__mmask16(~tiny), exp_in_range(xc));
  return _mm512_mask_mov_ps(value, huge, _mm512_set1_ps(std::numeric_limits<float>::infinity()));
}

}  // namespace shardlm::ops::avx512
