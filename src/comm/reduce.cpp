#include "comm/reduce.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace shardlm::comm {
namespace {

constexpr size_t kBlock = 256;  // elements widened to f32 at a time

void load(float* dst, const void* src, size_t offset, size_t n, DType dtype) {
  if (dtype == DType::F32) {
    std::memcpy(dst, static_cast<const float*>(src) + offset, n * 4);
    return;
  }
  auto* h = static_cast<const uint16_t*>(src) + offset;
  if (dtype == DType::F16)
    for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
  else
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}

void store(void* dst, const float* src, size_t offset, size_t n, DType dtype) {
  if (dtype == DType::F32) {
    std::memcpy(static_cast<float*>(dst) + offset, src, n * 4);
    return;
  }
  auto* h = static_cast<uint16_t*>(dst) + offset;
  if (dtype == DType::F16)
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
  else
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

void combine(float* acc, const float* x, size_t n, ReduceOp op) {
  if (op == ReduceOp::Sum)
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  else
    for (size_t i = 0; i < n; ++i) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
}

}  // namespace

size_t reduce_elem_bytes(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    default:
      throw Error(fmt::format("comm: cannot reduce dtype {} (only f32, f16, bf16)",
                              dtype_name(dtype)));
  }
}

void reduce_into(void* acc, const void* src, size_t count, DType dtype, ReduceOp op) {
  reduce_elem_bytes(dtype);
  if (dtype == DType::F32) {  // no widening needed: combine in place
    combine(static_cast<float*>(acc), static_cast<const float*>(src), count, op);
    return;
  }
  float a[kBlock], b[kBlock];
  for (size_t at = 0; at < count; at += kBlock) {
    size_t n = std::min(kBlock, count - at);
    load(a, acc, at, n, dtype);
    load(b, src, at, n, dtype);
    combine(a, b, n, op);
    store(acc, a, at, n, dtype);
  }
}

void reduce_ordered(void* out, std::span<const void* const> srcs, size_t count, DType dtype,
                    ReduceOp op) {
  reduce_elem_bytes(dtype);
  if (srcs.empty()) return;
  float acc[kBlock], x[kBlock];
  for (size_t at = 0; at < count; at += kBlock) {
    size_t n = std::min(kBlock, count - at);
    load(acc, srcs[0], at, n, dtype);
    for (size_t k = 1; k < srcs.size(); ++k) {
      load(x, srcs[k], at, n, dtype);
      combine(acc, x, n, op);
    }
    store(out, acc, at, n, dtype);
  }
}

}  // namespace shardlm::comm
