// Scalar reference conversions between f32 and every compute type of
// core/dtype.h. These define the numerics: every fast path is tested against
// them. Byte-exact with ggml's reference (de)quantizers.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace shardlm {

// dst[0..n) = values of the n elements at src. n is a multiple of the block size.
// Types without a decoder (IQ*, TQ*, ...) → Error naming the type.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Reference quantizer (ggml's *_ref rounding): n floats → row_bytes(type, n) bytes.
// Types without an encoder → Error naming the type.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// True when dequantize_row / quantize_row accept the type.
bool can_dequantize(DType type);
bool can_quantize(DType type);

// Typed entry points for kernels quantizing activations (n multiple of the
// block size; no checks). Same bytes as quantize_row.
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, block_q8_1* y, int64_t n);
void quantize_row_q8_K(const float* x, block_q8_K* y, int64_t n);

}  // namespace shardlm
