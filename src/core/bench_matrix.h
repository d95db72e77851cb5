// A weight matrix of real quantized rows for speed measurements (`bench
// kernels`, the planner's kernel rates): a few random rows quantized with the
// reference quantizer, repeated (speed does not depend on the values), on
// 2 MiB pages where granted like a model's weights (its copies: stretches
// of a HugePageArena; the file's mapping: its large folios), since 4 KiB
// pages make streaming them slower.
#pragma once

#include <cstdint>
#include <memory>

#include "core/matmul.h"

namespace shardlm {

struct BenchMatrix {
  std::shared_ptr<uint8_t[]> bytes;
  MatrixView view;
};

BenchMatrix make_bench_matrix(DType type, int64_t rows, int64_t cols);
// The same in the layout a model's matrix of that type gets on this CPU
// (ModelWeights::pack_panels: Panels16 where panels_pay), so that rates
// measured on it are those of the kernels the model runs.
BenchMatrix make_model_bench_matrix(DType type, int64_t rows, int64_t cols);

}  // namespace shardlm
