// A weight matrix of real quantized rows for speed measurements (`bench
// kernels`, the planner's kernel rates): a few random rows quantized with the
// reference quantizer, repeated (speed does not depend on the values).
#pragma once

#include <cstdint>
#include <memory>

#include "core/matmul.h"

namespace shardlm {

struct BenchMatrix {
  std::unique_ptr<uint8_t[]> bytes;
  MatrixView view;
};

BenchMatrix make_bench_matrix(DType type, int64_t rows, int64_t cols);

}  // namespace shardlm
