// Attention of one query head over the cached positions of its sequence.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace shardlm {

struct CachedHead {
  DType type;            // F32 or F16
  const void* k;         // key of position 0 of this head; position p at + p * k_stride elements
  const void* v;
  int64_t k_stride, v_stride;
  int64_t head_dim_k, head_dim_v;
};

// out = Σ_{p < n_pos} softmax_p(scale · q·k_p) · v_p. scores: n_pos floats of scratch.
void attend_one_head(const float* q, const CachedHead& h, int64_t n_pos, float scale, float* scores, float* out);

}  // namespace shardlm
