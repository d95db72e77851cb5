// How activations travel between ranks (`--wire-type`): the tensor-parallel
// all-reduce payloads and the pipeline hand-off of hidden states. F32 is
// exact and the default; F16 / BF16 halve the bytes; Q8_0 (blocks of 32 int8
// with an f16 scale, the GGUF layout) sends 34 bytes per 32 values.
//
// A row of n values is encoded on its own, its last block padded with zeros,
// so the bytes of a row never depend on the rows sent with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace shardlm::parallel {

// True for the four types above.
bool is_wire_type(DType t);
// "f32|f16|bf16|q8_0" (case-insensitive) → the type; Error naming `what` otherwise.
DType wire_type_from_name(const std::string& name, const std::string& what = "--wire-type");
// Lower-case name as the flag spells it.
std::string wire_type_name(DType t);

// Encoded bytes of one row of n values.
size_t wire_row_bytes(DType t, size_t n);
// rows × n values (row-major) ↔ rows × wire_row_bytes(t, n) bytes.
void wire_encode(DType t, const float* x, size_t rows, size_t n, uint8_t* out);
void wire_decode(DType t, const uint8_t* in, size_t rows, size_t n, float* out);

}  // namespace shardlm::parallel
