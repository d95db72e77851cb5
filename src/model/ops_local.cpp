#include "model/ops_local.h"

#include <cmath>

namespace shardlm::model_ops {

void rms_norm(float* out, const float* x, const float* w, int64_t n, float eps) {
  // A double sum keeps long rows (n_embd in the thousands) as exact as the reference.
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const float scale = 1.0f / std::sqrt(float(sum / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void rope_adjacent(float* head, const float* cos_sin, int64_t n_rot) {
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float a = head[2 * i], b = head[2 * i + 1];
    head[2 * i] = a * c - b * s;
    head[2 * i + 1] = a * s + b * c;
  }
}

void rope_neox(float* head, const float* cos_sin, int64_t n_rot) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float a = head[i], b = head[i + half];
    head[i] = a * c - b * s;
    head[i + half] = a * s + b * c;
  }
}

void softmax(float* x, int64_t n) {
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::fmax(max, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace shardlm::model_ops
