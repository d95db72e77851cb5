// Small per-token operations of the forward pass (scalar). Private to the
// model module until core/ops.h provides shared, vectorised versions.
#pragma once

#include <cstdint>

namespace shardlm::model_ops {

// out[i] = x[i] / sqrt(mean(x²) + eps) * w[i]; out may alias x.
void rms_norm(float* out, const float* x, const float* w, int64_t n, float eps);

// Rotates the first n_rot values of one head by angles pos·inv_freq[i]
// (cos_sin holds cos, sin for each of the n_rot/2 pairs).
void rope_adjacent(float* head, const float* cos_sin, int64_t n_rot);
void rope_neox(float* head, const float* cos_sin, int64_t n_rot);

// x[i] = exp(x[i] - max) / Σ, in place.
void softmax(float* x, int64_t n);

// gate[i] = silu(gate[i]) · up[i].
void swiglu(float* gate, const float* up, int64_t n);

void add(float* y, const float* x, int64_t n);  // y += x

}  // namespace shardlm::model_ops
