// The constants of the vector e^x (core/ops_exp_avx2.h, ops_exp_avx512.h),
// kept in one place because the two must give the same bits: x = n·ln2 + r
// with |r| ≤ ln2/2 (ln2 split in two so r keeps its digits), e^r by its
// Taylor series to degree 7 (truncation < 1e-8 relative there), then 2^n.
#pragma once

namespace shardlm::ops::exp_series {

inline constexpr float kMin = -87.33f;  // below: 0 (also -inf)
inline constexpr float kMax = 88.72f;   // above: +inf
inline constexpr float kLog2e = 1.44269504f;
inline constexpr float kLn2High = 0.693145752f;  // exact in 16 bits
inline constexpr float kLn2Low = 1.42860677e-6f;
// The series' coefficients from the highest degree down (Horner's order).
inline constexpr float kTerms[] = {1.f / 5040.f, 1.f / 720.f, 1.f / 120.f, 1.f / 24.f, 1.f / 6.f, 0.5f, 1.f, 1.f};

}  // namespace shardlm::ops::exp_series
