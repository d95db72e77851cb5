#include "core/ops.h"

#include <cmath>
#include <limits>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/ops_impl.h"

namespace shardlm::ops {
namespace ref {

// Sums of squares and dot products accumulate in double: the reference must
// not lose digits on long rows, so fast paths are judged against it.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  if (n <= 0) return;
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * x[i];
  const float inv_rms = 1.f / std::sqrt(float(sum_sq / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv_rms * (weight ? weight[i] : 1.f);
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / (1.f + std::exp(-x[i]));
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

void add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void mul(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

float dot(const float* a, const float* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(a[i]) * b[i];
  return float(sum);
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i)
    if (x[i] > best_value) {
      best = i;
      best_value = x[i];
    }
  return best;
}

int64_t find_above(const float* x, int64_t n, float floor) {
  int64_t i = 0;
  while (i < n && !(x[i] > floor)) ++i;
  return i;
}

void attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores,
            float* out) {
  auto at = [&](const void* base, int64_t i) {
    return kv.f16 ? f16_to_f32(static_cast<const f16_t*>(base)[i]) : static_cast<const float*>(base)[i];
  };
  for (int64_t g = 0; g < n_q; ++g) {
    float* s = scores + g * n_pos;
    for (int64_t p = 0; p < n_pos; ++p) {
      double dot = 0;
      for (int64_t i = 0; i < kv.dim_k; ++i) dot += double(q[g * kv.dim_k + i]) * at(kv.k, p * kv.k_stride + i);
      s[p] = float(dot) * scale;
    }
    softmax(s, n_pos);
    float* o = out + g * kv.dim_v;
    for (int64_t i = 0; i < kv.dim_v; ++i) o[i] = 0;
    for (int64_t p = 0; p < n_pos; ++p)
      for (int64_t i = 0; i < kv.dim_v; ++i) o[i] += s[p] * at(kv.v, p * kv.v_stride + i);
  }
}

}  // namespace ref

namespace {
bool use_avx2() { return active_isa() >= Isa::Avx2; }
}  // namespace

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  use_avx2() ? avx2::rms_norm(x, weight, n, eps, out) : ref::rms_norm(x, weight, n, eps, out);
}
void softmax(float* x, int64_t n) { use_avx2() ? avx2::softmax(x, n) : ref::softmax(x, n); }
void silu(const float* x, float* out, int64_t n) {
  if (active_isa() >= Isa::Avx512) return avx512::silu(x, out, n);
  use_avx2() ? avx2::silu(x, out, n) : ref::silu(x, out, n);
}
void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (active_isa() >= Isa::Avx512) return avx512::swiglu(gate, up, out, n);
  use_avx2() ? avx2::swiglu(gate, up, out, n) : ref::swiglu(gate, up, out, n);
}
void add(const float* a, const float* b, float* out, int64_t n) {
  use_avx2() ? avx2::add(a, b, out, n) : ref::add(a, b, out, n);
}
void mul(const float* a, const float* b, float* out, int64_t n) {
  use_avx2() ? avx2::mul(a, b, out, n) : ref::mul(a, b, out, n);
}
float dot(const float* a, const float* b, int64_t n) { return use_avx2() ? avx2::dot(a, b, n) : ref::dot(a, b, n); }
int64_t argmax(const float* x, int64_t n) {
  if (active_isa() >= Isa::Avx512) return avx512::argmax(x, n);
  return use_avx2() ? avx2::argmax(x, n) : ref::argmax(x, n);
}
int64_t find_above(const float* x, int64_t n, float floor) {
  if (active_isa() >= Isa::Avx512) return avx512::find_above(x, n, floor);
  return use_avx2() ? avx2::find_above(x, n, floor) : ref::find_above(x, n, floor);
}
bool attend_with_isa(Isa isa, const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale,
                     float* scores, float* out, SumOrder order) {
  if (isa > active_isa()) return false;
  switch (isa) {
    case Isa::Scalar: ref::attend(q, n_q, kv, n_pos, scale, scores, out); return true;
    case Isa::Avx2: avx2::attend(q, n_q, kv, n_pos, scale, scores, out, order); return true;
    case Isa::Avx512: return avx512::attend(q, n_q, kv, n_pos, scale, scores, out, order);
    default: return false;  // AMX has no attention of its own
  }
}

Isa attend_isa(const KvHead& kv) {
  if (active_isa() >= Isa::Avx512 && avx512::takes_attend(kv)) return Isa::Avx512;
  return use_avx2() ? Isa::Avx2 : Isa::Scalar;
}

void attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores,
            float* out, SumOrder order) {
  attend_with_isa(attend_isa(kv), q, n_q, kv, n_pos, scale, scores, out, order);
}

void attend_tokens(const float* q, int64_t q_stride, int64_t n_tok, int64_t n_q, const KvHead& kv, int64_t n_pos,
                   float scale, float* scores, float* out, int64_t out_stride, SumOrder order) {
  if (n_tok > 1 && active_isa() >= Isa::Avx512 &&
      avx512::attend_block(q, q_stride, n_tok, n_q, kv, n_pos, scale, out, out_stride))
    return;
  if (n_tok > 1 && use_avx2() && avx2::attend_block(q, q_stride, n_tok, n_q, kv, n_pos, scale, out, out_stride))
    return;
  for (int64_t i = 0; i < n_tok; ++i)
    attend(q + i * q_stride, n_q, kv, n_pos + i, scale, scores, out + i * out_stride, order);
}

// The compiler vectorizes these two well enough at -O2 for the baseline ISA.
void scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}
void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace shardlm::ops
