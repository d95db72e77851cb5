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

// For the n_q query heads q (head_dim_k apart) that share this KV head:
// out_g = Σ_{p < n_pos} softmax_p(scale · q_g·k_p) · v_p (head_dim_v apart).
// scores: n_q · n_pos floats of scratch.
void attend_heads(const float* q, int64_t n_q, const CachedHead& h, int64_t n_pos, float scale, float* scores,
                  float* out);

}  // namespace shardlm
