// e^x on 8 lanes, shared by the AVX2 ops and the AVX2 attention blocks
// (include only from files compiled with -mavx2 -mfma).
#pragma once

#include <immintrin.h>

#include <limits>

#include "core/ops_exp_series.h"

namespace shardlm::ops::avx2 {

// e^x to ~2 ulp (core/ops_exp_series.h), 2^n built in the exponent bits.
// Below -87.3 the result is 0 (also for -inf), above 88.7 it is +inf.
inline __m256 exp_ps(__m256 x) {
  namespace e = exp_series;
  const __m256 too_small = _mm256_cmp_ps(x, _mm256_set1_ps(e::kMin), _CMP_LT_OQ);
  const __m256 too_large = _mm256_cmp_ps(x, _mm256_set1_ps(e::kMax), _CMP_GT_OQ);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(e::kMin)), _mm256_set1_ps(e::kMax));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(e::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(e::kLn2High), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(e::kLn2Low), r);
  __m256 p = _mm256_set1_ps(e::kTerms[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(e::kTerms[i]));
  // n ∈ [-126, 128] and 2^128 has no f32 exponent: apply 2^n as two halves.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256i rest = _mm256_sub_epi32(ni, half);
  const __m256 pow_half = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 pow_rest = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, _mm256_set1_epi32(127)), 23));
  __m256 result = _mm256_mul_ps(_mm256_mul_ps(p, pow_half), pow_rest);
  result = _mm256_andnot_ps(too_small, result);
  return _mm256_blendv_ps(result, _mm256_set1_ps(std::numeric_limits<float>::infinity()), too_large);
}

}  // namespace shardlm::ops::avx2
