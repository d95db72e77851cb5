// Element-wise reduction of n same-length buffers into one, in source order
// (((s0 op s1) op s2) ...), f16/bf16 accumulated in f32 and rounded once, so
// every rank that reduces the same sources gets the same bits.
#pragma once

#include <cstddef>

#include "comm/transport.h"

namespace shardlm::comm::shm {

// out may alias srcs[0] (not the others). dtype: F32, F16 or BF16.
void reduce_sources(void* out, const void* const* srcs, int nsrc, size_t count, DType dtype, ReduceOp op);

// Throws shardlm::Error for a dtype the collectives do not reduce.
size_t reduce_elem_bytes(DType dtype);

}  // namespace shardlm::comm::shm
