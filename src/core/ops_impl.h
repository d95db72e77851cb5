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
int64_t argmax(const float* x, int64_t n);
int64_t find_above(const float* x, int64_t n, float floor);
void attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores,
            float* out);
}  // namespace ref

// Compiled with -mavx2 -mfma; call only when active_isa() >= Isa::Avx2.
namespace avx2 {
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);
void softmax(float* x, int64_t n);
// Softmax of each of `rows` rows of n, each row's sum taken in element order
// from zero as a lane of the blocked attention kernels takes it (and their
// 1 / max(sum, 1e-30)): decode attention's weights, the same bits as a block's.
void softmax_in_order(float* x, int64_t rows, int64_t n);
void silu(const float* x, float* out, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void add(const float* a, const float* b, float* out, int64_t n);
void mul(const float* a, const float* b, float* out, int64_t n);
float dot(const float* a, const float* b, int64_t n);
int64_t argmax(const float* x, int64_t n);  // core/ops_argmax_avx2.cpp
int64_t find_above(const float* x, int64_t n, float floor);  // core/ops_find_above_avx2.cpp
// The blocked kernel behind attend_tokens without AVX-512 (core/ops_attend_block_avx2.cpp):
// the AVX-512 kernel's bits and shapes; false (nothing done) for shapes it does not take.
bool attend_block(const float* q, int64_t q_stride, int64_t n_tok, int64_t n_q, const KvHead& kv, int64_t n_pos,
                  float scale, float* out, int64_t out_stride);
void attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores,
            float* out, SumOrder order);
}  // namespace avx2

// Compiled with AVX-512 flags; call only when active_isa() >= Isa::Avx512.
namespace avx512 {
// The blocked kernel behind attend_tokens; false (nothing done) for shapes it
// does not take.
bool attend_block(const float* q, int64_t q_stride, int64_t n_tok, int64_t n_q, const KvHead& kv, int64_t n_pos,
                  float scale, float* out, int64_t out_stride);
// Decode attention (core/ops_attend_decode_avx512.cpp) for the shapes
// takes_attend accepts (both head dimensions multiples of 16); false
// (nothing done) for the others.
inline bool takes_attend(const KvHead& kv) { return kv.dim_k % 16 == 0 && kv.dim_v % 16 == 0; }
bool attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores, float* out,
            SumOrder order);
int64_t argmax(const float* x, int64_t n);  // core/ops_argmax_avx512.cpp
void silu(const float* x, float* out, int64_t n);  // core/ops_silu_avx512.cpp
void swiglu(const float* gate, const float* up, float* out, int64_t n);
int64_t find_above(const float* x, int64_t n, float floor);  // core/ops_find_above_avx512.cpp
}  // namespace avx512

}  // namespace shardlm::ops
