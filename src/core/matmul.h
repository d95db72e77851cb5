// Weight × activation products, the hot loop of every forward pass.
//   y[t][r] = Σ_k W[r][k] · x[t][k]   for t < n_tokens, r < rows
// W is a row-major matrix of any compute DType (rows of `cols` elements, as in
// GGUF: ne0 = cols, ne1 = rows). x and y are f32, row-major per token.
// n_tokens == 1 is matrix × vector (decode); larger is matrix × matrix.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace shardlm {

class ThreadPool;

struct MatrixView {
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_stride = 0;  // bytes between rows (normally row_bytes(type, cols))

  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + size_t(r) * row_stride; }
};

// y = W · x for n_tokens activation vectors. pool may be null (single thread).
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool);

}  // namespace shardlm
