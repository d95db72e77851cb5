// Why a tensor-parallel rank packs its column slices (model/weights.h,
// ModelWeights::pack_column_slices): the decode matvec over half the columns
// of ffn_down-shaped Q4_0 matrices (2048 × 8192), read in place (every row
// skips the other rank's half) vs packed contiguously, and the whole matrix
// for scale. Thread CPU time, 5 interleaved rounds, 24 matrices (~200 MB,
// beyond the caches).
// Build: g++ -O2 -std=c++20 -Isrc bench/strided_slice.cpp build/src/core/libshardlm_core.a \
//          -lspdlog -lfmt -lpthread -o /tmp/strided_slice
#include <cstdio>
#include <ctime>
#include <vector>

#include "core/bench_matrix.h"
#include "core/matmul.h"

using namespace shardlm;

static double thread_cpu() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

int main() {
  const int64_t rows = 2048, cols = 8192, n = 24;
  std::vector<BenchMatrix> full, half;
  for (int i = 0; i < n; ++i) full.push_back(make_bench_matrix(DType::Q4_0, rows, cols));
  for (int i = 0; i < n; ++i) half.push_back(make_bench_matrix(DType::Q4_0, rows, cols / 2));
  std::vector<float> x(size_t(cols), 0.5f), y(size_t(rows));
  const double half_mb = double(n) * double(half[0].view.row_stride) * double(rows) / 1e6;
  for (int round = 0; round < 5; ++round) {
    const double t0 = thread_cpu();
    for (auto& m : full) {
      MatrixView v = m.view;
      v.cols = cols / 2;  // the first half of every row, full stride
      matmul(v, x.data(), 1, y.data(), nullptr);
    }
    const double t1 = thread_cpu();
    for (auto& m : half) matmul(m.view, x.data(), 1, y.data(), nullptr);
    const double t2 = thread_cpu();
    for (auto& m : full) matmul(m.view, x.data(), 1, y.data(), nullptr);
    const double t3 = thread_cpu();
    std::printf("half in place %.1f ms (%.1f GB/s) | half packed %.1f ms (%.1f GB/s) | whole %.1f ms\n",
                (t1 - t0) * 1e3, half_mb / (t1 - t0) / 1e3, (t2 - t1) * 1e3, half_mb / (t2 - t1) / 1e3,
                (t3 - t2) * 1e3);
  }
}
