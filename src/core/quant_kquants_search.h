// Scale searches of the K-quant reference encoders (internal to core). Each
// fits codes L and a scale (and for the asymmetric formats a minimum) to a
// small group of floats. They reproduce ggml's reference arithmetic operation
// by operation, because llama-quantize wrote the models we load with it and a
// different rounding order would pick different codes.
#pragma once

#include <cstdint>

namespace shardlm::kquant_search {

// Symmetric codes l in [-nmax, nmax) with x ≈ scale·l, weighted by x²; tries 19
// trial inverse scales around nmax/max and keeps the best least-squares fit.
// L receives l + nmax. Returns the scale (negative when the extreme is negative).
float fit_symmetric_x2(int n, int nmax, const float* x, int8_t* L);

// Symmetric codes as above, then up to 5 rounds of coordinate descent moving
// single codes while the weighted fit improves (Q3_K).
float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L);

// Asymmetric grid search of how the offset/scale range is tried.
struct AffineGrid {
  float rmin;   // first trial adds this to nmax
  float rdelta; // step between trials
  int nstep;    // trials 0..nstep
  bool abs_error;  // minimise Σw|err| instead of Σw·err²
};

// Codes l in [0, nmax] with x ≈ scale·l − min_out (min_out ≥ 0), weighted by w.
// scratch holds n bytes. Returns the scale.
float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, uint8_t* scratch,
                 const AffineGrid& grid);

}  // namespace shardlm::kquant_search
