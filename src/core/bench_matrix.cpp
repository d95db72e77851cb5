#include "core/bench_matrix.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/huge_pages.h"
#include "core/quant.h"

namespace shardlm {

namespace {

constexpr int64_t kDistinct = 8;  // divides 16: every 16-row group is the same bytes

}  // namespace

BenchMatrix make_bench_matrix(DType type, int64_t rows, int64_t cols) {
  const size_t stride = row_bytes(type, cols);
  BenchMatrix m;
  // Rounded up to whole 2 MiB pages, as a model's matrices sit inside its
  // copies' stretches (HugePageArena): the last bytes on 4 KiB pages streamed
  // slower.
  m.bytes = alloc_huge_page_buffer((stride * size_t(std::max<int64_t>(rows, 1)) + kHugePageBytes - 1) /
                                   kHugePageBytes * kHugePageBytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < std::min(rows, kDistinct); ++r) {
    for (auto& v : row) v = normal(rng);
    quantize_row(type, row.data(), m.bytes.get() + stride * size_t(r), cols);
  }
  for (int64_t r = kDistinct; r < rows; ++r)
    std::memcpy(m.bytes.get() + stride * size_t(r), m.bytes.get() + stride * size_t(r % kDistinct), stride);
  m.view = MatrixView{type, m.bytes.get(), rows, cols, stride};
  return m;
}

BenchMatrix make_model_bench_matrix(DType type, int64_t rows, int64_t cols) {
  BenchMatrix m = make_bench_matrix(type, rows, cols);
  if (!panels_pay(m.view)) return m;
  const size_t group_bytes = 16 * m.view.row_stride;
  std::vector<uint8_t> group(group_bytes);
  MatrixView first = m.view;
  first.rows = 16;
  repack_panels(first, group.data());
  for (int64_t r = 0; r < rows; r += 16) std::memcpy(m.bytes.get() + size_t(r) * m.view.row_stride, group.data(), group_bytes);
  m.view.layout = WeightLayout::Panels16;
  return m;
}

}  // namespace shardlm
