#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops.h"

namespace shardlm::ops {

namespace {

void check_pairs(const RopeParams& p) {
  if (p.n_rot < 0 || p.n_rot % 2 != 0)
    throw Error(fmt::format("rope: rotated dimension count {} must be even and not negative", p.n_rot));
}

void check_heads(const RopeParams& p) {
  check_pairs(p);
  if (p.n_rot > p.head_dim)
    throw Error(fmt::format("rope: rotated dimension count {} exceeds head_dim {}", p.n_rot, p.head_dim));
}

}  // namespace

void rope_angles(const RopeParams& p, int64_t pos, float* cos_sin) {
  check_pairs(p);
  // The frequency walks down by a constant f32 factor per pair, as llama.cpp
  // computes it, so positions far into the context turn by the same
  // (slightly rounded) angles as there.
  const float step = std::pow(p.freq_base, -2.f / float(p.n_rot));
  float theta = float(pos);
  for (int i = 0; i < p.n_rot / 2; ++i) {
    const float factor = p.freq_factors ? p.freq_factors[i] : 1.f;
    const float extrapolated = theta / factor;
    float angle = p.freq_scale * extrapolated;
    if (p.yarn) {
      const float ramp = 1.f - std::min(1.f, std::max(0.f, (float(i) - p.yarn_corr_low) /
                                                              std::max(0.001f, p.yarn_corr_high - p.yarn_corr_low)));
      angle = angle * (1.f - ramp) + extrapolated * ramp;
    }
    cos_sin[2 * i] = std::cos(angle) * p.magnitude;
    cos_sin[2 * i + 1] = std::sin(angle) * p.magnitude;
    theta *= step;
  }
}

void rope_rotate(float* x, int n_heads, const RopeParams& p, const float* cos_sin) {
  check_heads(p);
  const int pairs = p.n_rot / 2;
  // Normal rotates (2i, 2i+1); NeoX rotates (i, i + pairs).
  const int stride = p.style == RopeStyle::AdjacentPairs ? 2 : 1;
  const int partner = p.style == RopeStyle::AdjacentPairs ? 1 : pairs;
  for (int h = 0; h < n_heads; ++h) {
    float* head = x + int64_t(h) * p.head_dim;
    for (int i = 0; i < pairs; ++i) {
      float* a = head + i * stride;
      float* b = a + partner;
      const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      const float x0 = *a, x1 = *b;
      *a = x0 * c - x1 * s;
      *b = x0 * s + x1 * c;
    }
  }
}

void rope(float* x, int n_heads, const RopeParams& p, int64_t pos) {
  thread_local std::vector<float> cos_sin;
  cos_sin.resize(size_t(std::max(p.n_rot, 0)));  // rope_angles throws for a negative count
  rope_angles(p, pos, cos_sin.data());
  rope_rotate(x, n_heads, p, cos_sin.data());
}

void yarn_correction_range(int n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                           float* low, float* high) {
  // The pair index whose wavelength makes n_turns rotations over n_ctx_orig positions.
  const auto pair_for = [&](float n_turns) {
    return float(n_rot) * std::log(float(n_ctx_orig) / (n_turns * 2.f * float(M_PI))) / (2.f * std::log(freq_base));
  };
  *low = std::max(0.f, std::floor(pair_for(beta_fast)));
  *high = std::min(float(n_rot - 1), std::ceil(pair_for(beta_slow)));
}

}  // namespace shardlm::ops
