#include "core/quant.h"

#include <fmt/format.h>
#include <string>

#include "core/error.h"
#include "core/quant_impl.h"

namespace shardlm {
namespace {

using namespace quant_impl;

void dequantize_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }
void quantize_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const f16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
}
void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<f16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const bf16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<bf16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

void quantize_q8_0_erased(const float* src, void* dst, int64_t n) {
  quantize_row_q8_0(src, static_cast<block_q8_0*>(dst), n);
}
void quantize_q8_1_erased(const float* src, void* dst, int64_t n) {
  quantize_row_q8_1(src, static_cast<block_q8_1*>(dst), n);
}
void quantize_q8_K_erased(const float* src, void* dst, int64_t n) {
  quantize_row_q8_K(src, static_cast<block_q8_K*>(dst), n);
}

struct Codec {
  DequantizeFn dequantize = nullptr;
  QuantizeFn quantize = nullptr;
};

Codec codec(DType type) {
  switch (type) {
    case DType::F32: return {dequantize_f32, quantize_f32};
    case DType::F16: return {dequantize_f16, quantize_f16};
    case DType::BF16: return {dequantize_bf16, quantize_bf16};
    case DType::Q4_0: return {dequantize_q4_0, quantize_q4_0};
    case DType::Q4_1: return {dequantize_q4_1, quantize_q4_1};
    case DType::Q5_0: return {dequantize_q5_0, quantize_q5_0};
    case DType::Q5_1: return {dequantize_q5_1, quantize_q5_1};
    case DType::Q8_0: return {dequantize_q8_0, quantize_q8_0_erased};
    case DType::Q8_1: return {dequantize_q8_1, quantize_q8_1_erased};
    case DType::Q2_K: return {dequantize_q2_K, quantize_q2_K};
    case DType::Q3_K: return {dequantize_q3_K, quantize_q3_K};
    case DType::Q4_K: return {dequantize_q4_K, quantize_q4_K};
    case DType::Q5_K: return {dequantize_q5_K, quantize_q5_K};
    case DType::Q6_K: return {dequantize_q6_K, quantize_q6_K};
    case DType::Q8_K: return {dequantize_q8_K, quantize_q8_K_erased};
    default: return {};
  }
}

std::string type_label(DType type) {
  if (auto t = dtype_traits(uint32_t(type))) return std::string(t->name);
  return "type id " + std::to_string(uint32_t(type));
}

void check_length(DType type, int64_t n, const char* what) {
  const int64_t block = traits(type).block_elems;
  if (n < 0 || n % block != 0)
    throw Error(fmt::format("{}: row of {} elements is not a multiple of the {} block size {}", what, n,
                            type_label(type), block));
}

}  // namespace

bool can_dequantize(DType type) { return codec(type).dequantize != nullptr; }
bool can_quantize(DType type) { return codec(type).quantize != nullptr; }

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const Codec c = codec(type);
  if (!c.dequantize) throw Error(fmt::format("dequantize_row: tensor type {} is not supported", type_label(type)));
  check_length(type, n, "dequantize_row");
  c.dequantize(src, dst, n);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const Codec c = codec(type);
  if (!c.quantize) throw Error(fmt::format("quantize_row: tensor type {} is not supported", type_label(type)));
  check_length(type, n, "quantize_row");
  c.quantize(src, dst, n);
}

}  // namespace shardlm
