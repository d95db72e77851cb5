// The prefill / batched-decode kernels (n_tokens >= 4): every ISA against the
// scalar reference on awkward shapes, strided row views, and the property the
// serving layer relies on: a token's result does not depend on which other
// tokens (4 or more in all) share its batch, nor on the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/matmul.h"
#include "core/matmul_kernels.h"
#include "core/thread_pool.h"
#include "test_matmul_util.h"

namespace shardlm {
namespace {

using test::abs_dot;
using test::random_activations;
using test::random_matrix;
using test::run;

const DType kQuantTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                             DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
const DType kGemmTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                        DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
const Isa kFastIsas[] = {Isa::Avx2, Isa::Avx512, Isa::Amx};

// The shape's columns rounded up to whole blocks of the type.
int64_t cols_for(DType type, int64_t want) {
  const int64_t block = traits(type).block_elems;
  return (want + block - 1) / block * block;
}

// A copy of m with `pad` bytes after every row: what a tensor-parallel slice
// of a wider matrix looks like.
struct Padded {
  std::vector<uint8_t> bytes;
  MatrixView view;
};
Padded with_padding(const MatrixView& m, size_t pad) {
  Padded p;
  const size_t row = m.row_stride;
  p.bytes.assign((row + pad) * size_t(m.rows), 0xA5);
  for (int64_t r = 0; r < m.rows; ++r) std::memcpy(p.bytes.data() + (row + pad) * size_t(r), m.row(r), row);
  p.view = m;
  p.view.data = p.bytes.data();
  p.view.row_stride = row + pad;
  return p;
}

TEST(MatmulGemm, MatchesReferenceForTokenCounts4To40) {
  ThreadPool pool(2);
  struct Shape {
    int64_t rows, cols, n_tokens;
  };
  // Rows: below, at and past one group of 16, and 520 (a thread's 80-row chunk
  // spans two of AVX2's 64-row blocks, the second partly filled), 143 (threads
  // claim 32- or 48-row chunks: the VNNI pair tiles, the last pair's second
  // group partly filled, and one group alone); tokens:
  // every tile size with tails.
  // Columns (floats): a vector's tail, and past the float kernel's 1024-column
  // chunks with a tail of a pair.
  const Shape shapes[] = {{5, 256, 4},  {16, 512, 5},   {33, 256, 7},   {17, 512, 16}, {31, 256, 23},
                          {3, 768, 40}, {520, 256, 6}, {143, 256, 21}, {9, 37, 8},    {13, 2081, 11}};
  for (Isa isa : kFastIsas) {
    if (!isa_available(isa)) continue;
    for (DType type : kGemmTypes) {
      for (const Shape& s : shapes) {
        const int64_t cols = cols_for(type, s.cols);
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::string(dtype_name(type)) + " " + std::to_string(s.rows) + "x" +
                     std::to_string(cols) + " tokens " + std::to_string(s.n_tokens));
        const auto m = random_matrix(type, s.rows, cols, uint32_t(s.rows * 7 + cols));
        const auto x = random_activations(s.n_tokens, cols, uint32_t(s.n_tokens));
        const auto ref = run(Isa::Scalar, m.view, x.data(), s.n_tokens, nullptr);
        const auto fast = run(isa, m.view, x.data(), s.n_tokens, &pool);
        for (int64_t t = 0; t < s.n_tokens; ++t)
          for (int64_t r = 0; r < s.rows; ++r) {
            const size_t i = size_t(t * s.rows + r);
            const double tol = 4e-5 * abs_dot(m.dequantized.data() + r * cols, x.data() + t * cols, cols) + 1e-30;
            ASSERT_NEAR(fast[i], ref[i], tol) << "row " << r << " token " << t;
          }
      }
    }
  }
}

// Every code at its largest against activations at ±127: the int16 sums
// of the AVX2 tiles are closest to overflowing here (e.g. Q6_K: two maddubs
// results of 2·63·127 each per lane).
TEST(MatmulGemm, LargestCodesDoNotOverflow) {
  const int64_t rows = 19, n_tokens = 6;
  for (Isa isa : kFastIsas) {
    if (!isa_available(isa)) continue;
    for (DType type : kQuantTypes) {
      const int64_t cols = cols_for(type, 1024);
      auto m = random_matrix(type, rows, cols, 3);
      std::mt19937 rng(4);
      const size_t block = traits(type).block_bytes;
      for (size_t off = 0; off < m.bytes.size(); off += block) {
        std::memset(m.bytes.data() + off, 0xFF, block);  // all code bits set (Q8_0: -1)
        test::fix_scales(type, m.bytes.data() + off, rng);
      }
      m.dequantized.resize(size_t(rows * cols));
      for (int64_t r = 0; r < rows; ++r) dequantize_row(type, m.view.row(r), m.dequantized.data() + r * cols, cols);
      std::vector<float> x(size_t(n_tokens * cols));
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t k = 0; k < cols; ++k) x[size_t(t * cols + k)] = t % 2 ? -1.0f : 1.0f;
      const auto ref = run(Isa::Scalar, m.view, x.data(), n_tokens, nullptr);
      const auto fast = run(isa, m.view, x.data(), n_tokens, nullptr);
      for (size_t i = 0; i < ref.size(); ++i) {
        const int64_t t = int64_t(i) / rows, r = int64_t(i) % rows;
        const double tol = 4e-5 * abs_dot(m.dequantized.data() + r * cols, x.data() + t * cols, cols) + 1e-30;
        ASSERT_NEAR(fast[i], ref[i], tol) << isa_name(isa) << " " << dtype_name(type) << " row " << r << " token " << t;
      }
    }
  }
}

TEST(MatmulGemm, StridedRowViewGivesTheSameResult) {
  const int64_t rows = 21, n_tokens = 9;
  for (Isa isa : kFastIsas) {
    if (!isa_available(isa)) continue;
    for (DType type : kGemmTypes) {
      const int64_t cols = cols_for(type, 512);
      const auto m = random_matrix(type, rows, cols, 4);
      const auto x = random_activations(n_tokens, cols, 5);
      const Padded padded = with_padding(m.view, 7);  // odd: rows are not even 2-byte aligned
      const auto compact = run(isa, m.view, x.data(), n_tokens, nullptr);
      const auto strided = run(isa, padded.view, x.data(), n_tokens, nullptr);
      ASSERT_EQ(0, std::memcmp(compact.data(), strided.data(), compact.size() * 4))
          << isa_name(isa) << " " << dtype_name(type);
    }
  }
}

// AVX-512 BF16 both ways: by vdpbf16ps (CPUs with AVX512_BF16, what matmul
// runs there) and widened to f32 (what runs on CPUs without it, so untested
// through matmul on this one).
TEST(MatmulGemm, Avx512Bf16PairsAndWidenedMatchReference) {
  using namespace matmul_impl;
  if (!isa_available(Isa::Avx512)) GTEST_SKIP() << "no AVX-512: " << cpu_summary();
  const int64_t rows = 23, cols = 1061, n_tokens = 9;
  const auto m = random_matrix(DType::BF16, rows, cols, 12);
  const auto x = random_activations(n_tokens, cols, 13);
  const auto ref = run(Isa::Scalar, m.view, x.data(), n_tokens, nullptr);
  for (const bool pairs : {false, true}) {
    const Kernel kernel = avx512_float_gemm_kernel(DType::BF16, pairs);
    if (!kernel) continue;  // no AVX512_BF16 here
    SCOPED_TRACE(pairs ? "vdpbf16ps" : "widened");
    PreparedInput prepared(x.data(), n_tokens, cols);
    KernelArgs args;
    args.w = &m.view;
    args.x = prepared.for_type(DType::BF16, nullptr, &args.x_stride);
    args.n_tokens = n_tokens;
    std::vector<float> y(size_t(rows * n_tokens), NAN);
    args.y = y.data();
    kernel(args, 0, rows);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        const size_t i = size_t(t * rows + r);
        const double tol = 4e-5 * abs_dot(m.dequantized.data() + r * cols, x.data() + t * cols, cols) + 1e-30;
        ASSERT_NEAR(y[i], ref[i], tol) << "row " << r << " token " << t;
      }
  }
}

// Batching does not change results: the 40 tokens computed together, or in
// batches of 4..23, or by two threads, give the same bits for every token
// (1100 columns: the float kernel's chunks with a tail).
TEST(MatmulGemm, TokenResultDoesNotDependOnItsBatch) {
  ThreadPool two(2);
  const int64_t rows = 37, n_tokens = 40;
  const int64_t splits[] = {0, 4, 9, 13, 17, 40};  // batches of 4, 5, 4, 4, 23
  for (Isa isa : kFastIsas) {
    if (!isa_available(isa)) continue;
    for (DType type : kGemmTypes) {
      const int64_t cols = cols_for(type, 1100);
      const auto m = random_matrix(type, rows, cols, 8);
      const auto x = random_activations(n_tokens, cols, 9);
      const auto whole = run(isa, m.view, x.data(), n_tokens, nullptr);
      const auto threaded = run(isa, m.view, x.data(), n_tokens, &two);
      ASSERT_EQ(0, std::memcmp(whole.data(), threaded.data(), whole.size() * 4)) << isa_name(isa) << " " << dtype_name(type);
      for (size_t s = 0; s + 1 < std::size(splits); ++s) {
        const int64_t t0 = splits[s], n = splits[s + 1] - t0;
        const auto part = run(isa, m.view, x.data() + t0 * cols, n, nullptr);
        ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + t0 * rows, part.size() * 4))
            << isa_name(isa) << " " << dtype_name(type) << " tokens " << t0 << ".." << t0 + n;
      }
    }
  }
}

}  // namespace
}  // namespace shardlm
