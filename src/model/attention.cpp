#include "model/attention.h"

#include <vector>

#include "core/ops.h"

namespace shardlm {
namespace {

// All 65536 half values as floats: the cache is read far more often than written.
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = f16_to_f32(f16_t(i));
    return t;
  }();
  return table.data();
}

struct F16Elems {
  const f16_t* p;
  const float* table;
  float operator[](int64_t i) const { return table[p[i]]; }
};

// The F16 cache path, one head at a time; the F32 one is ops::attend.
template <class Elems>
void attend(const float* q, Elems k, Elems v, const CachedHead& h, int64_t n_pos, float scale, float* scores,
            float* out) {
  for (int64_t p = 0; p < n_pos; ++p) {
    const int64_t row = p * h.k_stride;
    float dot = 0;
    for (int64_t i = 0; i < h.head_dim_k; ++i) dot += q[i] * k[row + i];
    scores[p] = dot * scale;
  }
  ops::softmax(scores, n_pos);
  for (int64_t i = 0; i < h.head_dim_v; ++i) out[i] = 0;
  for (int64_t p = 0; p < n_pos; ++p) {
    const int64_t row = p * h.v_stride;
    const float w = scores[p];
    for (int64_t i = 0; i < h.head_dim_v; ++i) out[i] += w * v[row + i];
  }
}

}  // namespace

void attend_heads(const float* q, int64_t n_q, const CachedHead& h, int64_t n_pos, float scale, float* scores,
                  float* out) {
  if (h.type == DType::F32) {
    const ops::KvHead kv{static_cast<const float*>(h.k), static_cast<const float*>(h.v), h.k_stride, h.v_stride,
                         h.head_dim_k, h.head_dim_v};
    ops::attend(q, n_q, kv, n_pos, scale, scores, out);
    return;
  }
  const float* t = f16_table();
  for (int64_t g = 0; g < n_q; ++g)
    attend(q + g * h.head_dim_k, F16Elems{static_cast<const f16_t*>(h.k), t},
           F16Elems{static_cast<const f16_t*>(h.v), t}, h, n_pos, scale, scores, out + g * h.head_dim_v);
}

}  // namespace shardlm
