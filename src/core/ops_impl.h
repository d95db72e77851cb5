// The per-ISA variants behind core/ops.h (internal; tests compare them).
#pragma once

#include <cstdint>

#include "core/ops.h"

namespace shardlm::ops {

namespace ref {
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);
void softmax(float* x, int64_t n);
void silu(const float* x, float* out, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void add(const float* a, const float* b, float* out, int64_t n);
void mul(const float* a, const float* b, float* out, int64_t n);
float dot(const float* a, const float* b, int64_t n);
void attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores,
            float* out);
}  // namespace ref

// Compiled with -mavx2 -mfma; call only when active_isa() >= Isa::Avx2.
namespace avx2 {
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);
void softmax(float* x, int64_t n);
void silu(const float* x, float* out, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void add(const float* a, const float* b, float* out, int64_t n);
void mul(const float* a, const float* b, float* out, int64_t n);
float dot(const float* a, const float* b, int64_t n);
void attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores,
            float* out);
}  // namespace avx2

}  // namespace shardlm::ops
