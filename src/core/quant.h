// Scalar reference conversions between f32 and every compute type of
// core/dtype.h. These define the numerics: every fast path is tested against
// them. Byte-exact with ggml's reference (de)quantizers.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace shardlm {

// dst[0..n) = values of the n elements at src. n is a multiple of the block size.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Reference quantizer (ggml's *_ref rounding): n floats → row_bytes(type, n) bytes.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace shardlm
