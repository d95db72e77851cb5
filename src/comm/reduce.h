// Element-wise reduction kernels shared by the generic algorithms and by any
// backend fast path, so every path rounds the same way.
#pragma once

#include <cstddef>
#include <span>

#include "comm/transport.h"

namespace shardlm::comm {

// Bytes per element of a reducible dtype (F32, F16, BF16); throws Error otherwise.
size_t reduce_elem_bytes(DType dtype);
// Element i of a buffer of a reducible dtype, as f32; and v stored there,
// rounded as the reductions round (benchmarks and tests that check sums).
float load_elem(const void* buf, DType dtype, size_t i);
void store_elem(void* buf, DType dtype, size_t i, float v);

// Max is `a > b ? a : b` with a the value so far (MAXPS), which fixes what
// NaN and ±0 give. AVX2 when the CPU has it, same bits as the scalar loop.

// acc[i] = acc[i] op src[i] for `count` elements. f16/bf16 are widened to
// f32, combined, and rounded to nearest even once.
void reduce_into(void* acc, const void* src, size_t count, DType dtype, ReduceOp op);

// out[i] = srcs[0][i] op srcs[1][i] op ... in the order given; f16/bf16 are
// accumulated in f32 over all sources and rounded once at the end, so every
// rank that reduces the same sources gets the same bits. `out` may alias any
// of the sources.
void reduce_ordered(void* out, std::span<const void* const> srcs, size_t count, DType dtype,
                    ReduceOp op);

// How a receive combines an arriving message into its destination instead of
// landing it in a buffer (Transport::irecv_reduce): acc op msg, or msg op acc
// when message_first, element by element as reduce_ordered computes it, so
// applying it piece by piece gives the bits of one reduce_ordered call.
struct Combine {
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  bool message_first = false;
  size_t elem_bytes() const { return reduce_elem_bytes(dtype); }
  // `bytes` of message (whole elements) at `msg` into the same bytes at `acc`.
  void apply(void* acc, const void* msg, size_t bytes) const;
};

}  // namespace shardlm::comm
