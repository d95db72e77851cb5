// The row order of float decode (1-3 tokens), shared by the AVX2 and AVX-512
// kernels: rows [r0, r1) run S at a time, an S-th of the range apart (r,
// r + q, r + 2q, ...), so the weights stream from S places far apart in
// memory; the rows left over run one at a time. On Zen 5 far-apart streams
// kept more lines in flight than one row at a time, and adjacent rows
// together (two streams 4 KiB apart) were the slowest of all: 0.6-0.7x of
// one row from DRAM (docs/bench/flt5.md). The grouping depends on the range;
// a row's result must not (the dot products' arithmetic is the same for any
// number of rows), so results do not depend on the thread count.
// Include only from an ISA's kernel file: it instantiates with that file's
// flags, in its anonymous namespace.
#pragma once

#include <type_traits>

#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

// dot(std::integral_constant<int, R>, rows[R], x[T], out): out[i][t] = row i · token t.
template <int S, int T, class Dot>
void strided_rows(const KernelArgs& a, int64_t r0, int64_t r1, Dot dot) {
  const MatrixView& m = *a.w;
  const float* x[T];
  for (int t = 0; t < T; ++t)
    x[t] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a.x) + a.x_stride * size_t(t));
  float out[S][3];
  const int64_t q = (r1 - r0) / S;
  for (int64_t r = r0; r < r0 + q; ++r) {
    const uint8_t* w[S];
    for (int i = 0; i < S; ++i) w[i] = m.row(r + i * q);
    dot(std::integral_constant<int, S>{}, w, x, out);
    for (int i = 0; i < S; ++i)
      for (int t = 0; t < T; ++t) a.y[t * m.rows + r + i * q] = out[i][t];
  }
  for (int64_t r = r0 + S * q; r < r1; ++r) {
    const uint8_t* w[1] = {m.row(r)};
    dot(std::integral_constant<int, 1>{}, w, x, out);
    for (int t = 0; t < T; ++t) a.y[t * m.rows + r] = out[0][t];
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl
