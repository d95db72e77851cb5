#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops.h"

namespace shardlm::ops {

void rope(float* x, int n_heads, const RopeParams& p, int64_t pos) {
  if (p.n_rot < 0 || p.n_rot % 2 != 0 || p.n_rot > p.head_dim)
    throw Error("rope: rotated dimension count " + std::to_string(p.n_rot) + " must be even and at most head_dim " +
                std::to_string(p.head_dim));
  const int pairs = p.n_rot / 2;
  // One angle per pair, shared by all heads. The frequency walks down by a
  // constant f32 factor per pair, as llama.cpp computes it, so positions far
  // into the context turn by the same (slightly rounded) angles as there.
  thread_local std::vector<float> cos_sin;
  cos_sin.resize(size_t(2 * pairs));
  const float step = std::pow(p.freq_base, -2.f / float(p.n_rot));
  float theta = float(pos);
  for (int i = 0; i < pairs; ++i) {
    const float factor = p.freq_factors ? p.freq_factors[i] : 1.f;
    const float angle = p.freq_scale * (theta / factor);
    cos_sin[size_t(2 * i)] = std::cos(angle);
    cos_sin[size_t(2 * i + 1)] = std::sin(angle);
    theta *= step;
  }
  // Normal rotates (2i, 2i+1); NeoX rotates (i, i + pairs).
  const int stride = p.style == RopeStyle::Normal ? 2 : 1;
  const int partner = p.style == RopeStyle::Normal ? 1 : pairs;
  for (int h = 0; h < n_heads; ++h) {
    float* head = x + int64_t(h) * p.head_dim;
    for (int i = 0; i < pairs; ++i) {
      float* a = head + i * stride;
      float* b = a + partner;
      const float c = cos_sin[size_t(2 * i)], s = cos_sin[size_t(2 * i + 1)];
      const float x0 = *a, x1 = *b;
      *a = x0 * c - x1 * s;
      *b = x0 * s + x1 * c;
    }
  }
}

}  // namespace shardlm::ops
