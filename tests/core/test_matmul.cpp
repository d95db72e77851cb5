#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/matmul.h"
#include "core/matmul_kernels.h"
#include "core/thread_pool.h"
#include "test_matmul_util.h"

namespace shardlm {
namespace {

using test::abs_dot;
using test::random_activations;
using test::random_matrix;

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                        DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K};

bool is_float(DType t) { return traits(t).block_elems == 1; }
int64_t act_block(DType t) { return traits(t).block_elems == QK_K ? QK_K : 32; }

std::vector<float> run(Isa isa, const MatrixView& w, const std::vector<float>& x, int64_t n_tokens,
                       ThreadPool* pool) {
  return test::run(isa, w, x.data(), n_tokens, pool);
}

// The reference against the plain f32 definition: quantizing the activations
// to 8 bits moves each x by at most half a step, d/2 = max|x_block| / 254, so
// the error is bounded by Σ |w| · d/2 (plus f32 rounding, and the f16 rounding
// of the block scale, which the 1e-5·Σ|w·x| term below covers only loosely).
TEST(MatmulReference, MatchesDequantizedDotWithinActivationRounding) {
  const int64_t rows = 5, cols = 512, n_tokens = 3;
  for (DType type : kTypes) {
    SCOPED_TRACE(std::string(dtype_name(type)));
    const auto m = random_matrix(type, rows, cols, 7);
    const auto x = random_activations(n_tokens, cols, 11);
    const auto y = run(Isa::Scalar, m.view, x, n_tokens, nullptr);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x.data() + t * cols;
      for (int64_t r = 0; r < rows; ++r) {
        const float* wr = m.dequantized.data() + r * cols;
        double exact = 0, bound = 0;
        for (int64_t i = 0; i < cols; ++i) exact += double(wr[i]) * double(xt[i]);
        if (!is_float(type)) {
          const int64_t blk = act_block(type);
          for (int64_t b = 0; b < cols; b += blk) {
            double amax = 0, wsum = 0;
            for (int64_t i = b; i < b + blk; ++i) amax = std::max(amax, std::fabs(double(xt[i])));
            for (int64_t i = b; i < b + blk; ++i) wsum += std::fabs(double(wr[i]));
            bound += wsum * amax / 254.0 * 1.0001;
          }
        }
        // F16/BF16 weights see activations rounded to their precision first
        // (half an ulp: 2^-11 for F16, 2^-8 for BF16, relative).
        // 32-element activation blocks carry an f16 scale: 2^-11 relative too.
        const bool f16_scale = !is_float(type) && act_block(type) == 32;
        const double act_rounding = type == DType::F16 || f16_scale ? 0x1p-11 : type == DType::BF16 ? 0x1p-8 : 0.0;
        bound += (1e-5 + act_rounding) * abs_dot(wr, xt, cols) + 1e-30;
        EXPECT_NEAR(y[size_t(t * rows + r)], exact, bound) << "row " << r << " token " << t;
      }
    }
  }
}

struct Shape {
  int64_t rows, cols, n_tokens;
};

// Every type × every fast ISA against the scalar reference on awkward shapes.
// Fast paths sum in another order, so they agree within 4e-5 · Σ|w·x|.
void check_isa_against_reference(Isa isa) {
  if (!isa_available(isa)) GTEST_SKIP() << isa_name(isa) << " kernels cannot run on this CPU/OS: " << cpu_summary();
  ThreadPool pool(2);
  // Token counts reach every path: 1-3 (decode: dot_rows and the K-quant
  // decode, odd row counts and rows past a 16-row chunk), 4 (one tile of 4),
  // 10 and 17 (tiles of 8 with tails of 2 and 1).
  const Shape shapes[] = {{1, 256, 1}, {7, 256, 3}, {33, 4096, 1}, {33, 512, 17}, {7, 4096, 3},
                          {1, 4096, 17}, {9, 256, 2}, {5, 512, 4}, {3, 512, 10}, {19, 2048, 2},
                          {35, 768, 3}, {17, 1280, 1}};
  for (DType type : kTypes) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " " + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                   " tokens " + std::to_string(s.n_tokens));
      const int64_t cols = is_float(type) && s.cols == 256 ? 37 : s.cols;  // float rows need not fill a vector
      const auto m = random_matrix(type, s.rows, cols, uint32_t(s.rows * 131 + cols));
      const auto x = random_activations(s.n_tokens, cols, uint32_t(s.n_tokens + 3));
      const auto ref = run(Isa::Scalar, m.view, x, s.n_tokens, nullptr);
      const auto fast = run(isa, m.view, x, s.n_tokens, &pool);
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        for (int64_t r = 0; r < s.rows; ++r) {
          const size_t i = size_t(t * s.rows + r);
          const double tol = 4e-5 * abs_dot(m.dequantized.data() + r * cols, x.data() + t * cols, cols) + 1e-30;
          ASSERT_NEAR(fast[i], ref[i], tol) << "row " << r << " token " << t;
        }
      }
    }
  }
}

// A view whose rows lie further apart than their bytes (a slice of a wider
// tensor): decode must follow row_stride, not the packed row length.
void check_strided_view(Isa isa) {
  if (!isa_available(isa)) GTEST_SKIP() << isa_name(isa) << " kernels cannot run on this CPU/OS: " << cpu_summary();
  ThreadPool pool(2);
  const int64_t rows = 21, cols = 512;
  for (DType type : kTypes) {
    const auto m = random_matrix(type, rows, cols, 77);
    const size_t packed = m.view.row_stride, stride = packed + 3 * traits(type).block_bytes + 64;
    std::vector<uint8_t> spread(stride * size_t(rows), 0xFF);  // gaps full of NaN-ish bytes
    for (int64_t r = 0; r < rows; ++r) std::memcpy(spread.data() + stride * size_t(r), m.view.row(r), packed);
    const MatrixView view{type, spread.data(), rows, cols, stride};
    for (int64_t n_tokens = 1; n_tokens <= 3; ++n_tokens) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " tokens " + std::to_string(n_tokens));
      const auto x = random_activations(n_tokens, cols, uint32_t(40 + n_tokens));
      const auto ref = run(Isa::Scalar, m.view, x, n_tokens, nullptr);
      const auto fast = run(isa, view, x, n_tokens, &pool);
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          const double tol = 4e-5 * abs_dot(m.dequantized.data() + r * cols, x.data() + t * cols, cols) + 1e-30;
          ASSERT_NEAR(fast[size_t(t * rows + r)], ref[size_t(t * rows + r)], tol) << "row " << r << " token " << t;
        }
    }
  }
}

TEST(MatmulIsa, StridedViewsMatchReference) {
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Amx}) {
    SCOPED_TRACE(isa_name(isa));
    if (isa_available(isa)) check_strided_view(isa);
  }
}

// The dispatcher says what decided: the timings where it had a choice.
TEST(MatmulDispatch, SaysWhyItChose) {
  using namespace matmul_impl;
  const Isa cap = active_isa();
  if (cap >= Isa::Avx2) {
    for (int64_t n_tokens = 1; n_tokens <= 3; ++n_tokens) {
      EXPECT_EQ(dispatch_isa(cap, DType::F16, n_tokens), Isa::Avx2);
      EXPECT_NE(dispatch_reason(cap, DType::F16, n_tokens).find("float weights, 1-3 tokens: avx2"), std::string::npos);
    }
  } else {
    EXPECT_EQ(dispatch_reason(cap, DType::F16, 1), "not timed: the newest ISA");
  }
  EXPECT_EQ(dispatch_reason(cap, DType::Q4_K, 64), "prefill: the newest ISA");
  const std::string why = dispatch_reason(cap, DType::Q4_K, 1);
  if (cap >= Isa::Avx512 && isa_has_kernel(Isa::Avx2, DType::Q4_K, 1) && isa_has_kernel(Isa::Avx512, DType::Q4_K, 1)) {
    EXPECT_NE(why.find("flushed from the caches / hot: avx2 "), std::string::npos) << why;
    EXPECT_NE(why.find(" avx512 "), std::string::npos) << why;
  } else {
    EXPECT_EQ(why, "the only candidate");
  }
}

// matmul() runs, per type and decode / batched-decode token count, the kernel
// the dispatcher timed fastest: its results match the reference, and repeated calls (later
// steps of a decode) give the same bits.
TEST(MatmulDispatch, DecodeMatchesReferenceAndIsStable) {
  ThreadPool pool(2);
  const int64_t rows = 37, cols = 1024;
  for (DType type : kTypes) {
    const auto m = random_matrix(type, rows, cols, 91);
    for (int64_t n_tokens : {1, 2, 3, 4, 6, 8}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " tokens " + std::to_string(n_tokens) + " on " +
                   isa_name(matmul_kernel_isa(type, n_tokens)));
      EXPECT_LE(matmul_kernel_isa(type, n_tokens), active_isa());
      const auto x = random_activations(n_tokens, cols, uint32_t(50 + n_tokens));
      const auto ref = run(Isa::Scalar, m.view, x, n_tokens, nullptr);
      std::vector<float> first(ref.size()), again(ref.size());
      matmul(m.view, x.data(), n_tokens, first.data(), &pool);
      matmul(m.view, x.data(), n_tokens, again.data(), nullptr);
      ASSERT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * 4));
      for (size_t i = 0; i < ref.size(); ++i) {
        const int64_t t = int64_t(i) / rows, r = int64_t(i) % rows;
        const double tol = 4e-5 * abs_dot(m.dequantized.data() + r * cols, x.data() + t * cols, cols) + 1e-30;
        ASSERT_NEAR(first[i], ref[i], tol) << "row " << r << " token " << t;
      }
    }
  }
}

// The dispatcher times the decode kernels of these types and keeps the
// fastest, which may differ from run to run: that is only safe because every
// ISA gives the same bits for them.
TEST(MatmulDispatch, TimedTypesGiveTheSameBitsOnEveryIsa) {
  if (!isa_available(Isa::Avx2)) GTEST_SKIP() << "no AVX2: nothing is timed";
  const int64_t rows = 35, cols = 1280;
  for (DType type : kTypes) {
    if (!matmul_impl::decode_bits_match_across_isas(type)) continue;
    const auto m = random_matrix(type, rows, cols, 17);
    for (int64_t n_tokens = 1; n_tokens <= 3; ++n_tokens) {
      const auto x = random_activations(n_tokens, cols, uint32_t(70 + n_tokens));
      const auto avx2 = run(Isa::Avx2, m.view, x, n_tokens, nullptr);
      for (Isa isa : {Isa::Avx512, Isa::Amx}) {
        if (!isa_available(isa) || !isa_has_kernel(isa, type, n_tokens)) continue;
        SCOPED_TRACE(std::string(dtype_name(type)) + " tokens " + std::to_string(n_tokens) + " " + isa_name(isa));
        const auto y = run(isa, m.view, x, n_tokens, nullptr);
        EXPECT_EQ(0, std::memcmp(y.data(), avx2.data(), y.size() * 4));
      }
    }
    // Batched decode (4-15 tokens) is timed between the AVX-512 and AMX panel
    // kernels only.
    if (!isa_available(Isa::Avx512) || !isa_available(Isa::Amx) || !isa_has_kernel(Isa::Amx, type, 4)) continue;
    for (int64_t n_tokens : {4, 5, 8, 9, 15}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " tokens " + std::to_string(n_tokens));
      const auto x = random_activations(n_tokens, cols, uint32_t(80 + n_tokens));
      const auto vnni = run(Isa::Avx512, m.view, x, n_tokens, nullptr);
      const auto amx = run(Isa::Amx, m.view, x, n_tokens, nullptr);
      EXPECT_EQ(0, std::memcmp(vnni.data(), amx.data(), amx.size() * 4));
    }
  }
}

// Every code of a K-quant block set to `fill`'s bits; with fill 0xFF the
// sub-block scales too (a zero fill keeps the random ones: all-zero scales
// would make every sum 0). The f16 scales stay.
void fill_k_codes(DType type, uint8_t* block, uint8_t fill) {
  const auto set = [&](auto& b, auto&... codes) {
    std::memcpy(&b, block, sizeof(b));
    (std::memset(codes, fill, sizeof(codes)), ...);
    if (fill) std::memset(b.scales, fill, sizeof(b.scales));
    std::memcpy(block, &b, sizeof(b));
  };
  switch (type) {
    case DType::Q2_K: { block_q2_K b; set(b, b.qs); break; }
    case DType::Q3_K: { block_q3_K b; set(b, b.hmask, b.qs); break; }
    case DType::Q4_K: { block_q4_K b; set(b, b.qs); break; }
    case DType::Q5_K: { block_q5_K b; set(b, b.qh, b.qs); break; }
    case DType::Q6_K: { block_q6_K b; set(b, b.ql, b.qh); break; }
    default: break;
  }
}

// The K-quant AVX2 prefill adds maddubs results in int16 lanes as long as
// they cannot overflow: every code at its extreme (all bits set, or none)
// against activations that all quantize to the extreme of one sign, so the
// sums are as large as they get. An overflow would be far outside 4e-5.
TEST(MatmulIsa, Avx2KQuantPrefillHoldsExtremeCodes) {
  if (!isa_available(Isa::Avx2)) GTEST_SKIP() << "no AVX2: " << cpu_summary();
  const int64_t rows = 9, cols = 512, n_tokens = 5;
  for (DType type : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (const uint8_t fill : {uint8_t(0x00), uint8_t(0xFF)}) {
      for (const float sign : {1.0f, -1.0f}) {
        SCOPED_TRACE(std::string(dtype_name(type)) + (fill ? " codes all ones" : " codes zero") +
                     (sign > 0 ? ", x = +1" : ", x = -1"));
        auto m = random_matrix(type, rows, cols, 5);
        for (size_t off = 0; off < m.bytes.size(); off += traits(type).block_bytes)
          fill_k_codes(type, m.bytes.data() + off, fill);
        for (int64_t r = 0; r < rows; ++r) dequantize_row(type, m.view.row(r), m.dequantized.data() + r * cols, cols);
        const std::vector<float> x(size_t(n_tokens * cols), sign);
        const auto ref = run(Isa::Scalar, m.view, x, n_tokens, nullptr);
        const auto fast = run(Isa::Avx2, m.view, x, n_tokens, nullptr);
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const size_t k = size_t(t * rows + r);
            const double tol = 4e-5 * abs_dot(m.dequantized.data() + r * cols, x.data() + t * cols, cols) + 1e-30;
            ASSERT_NEAR(fast[k], ref[k], tol) << "row " << r << " token " << t;
          }
      }
    }
  }
}

TEST(MatmulIsa, Avx2MatchesReference) { check_isa_against_reference(Isa::Avx2); }
TEST(MatmulIsa, Avx512MatchesReference) { check_isa_against_reference(Isa::Avx512); }
TEST(MatmulIsa, AmxMatchesReference) { check_isa_against_reference(Isa::Amx); }

// The smallest matrix per type: one block, one row, one token.
TEST(MatmulIsa, SingleBlockSingleRow) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx}) {
    if (!isa_available(isa)) continue;
    for (DType type : kTypes) {
      const int64_t cols = traits(type).block_elems;
      const auto m = random_matrix(type, 1, cols, 5);
      const auto x = random_activations(1, cols, 6);
      const float y = run(isa, m.view, x, 1, nullptr)[0];
      const double tol = 1e-2 * abs_dot(m.dequantized.data(), x.data(), cols) + 1e-30;
      double exact = 0;
      for (int64_t i = 0; i < cols; ++i) exact += double(m.dequantized[size_t(i)]) * x[size_t(i)];
      EXPECT_NEAR(y, exact, tol) << isa_name(isa) << " " << dtype_name(type);
    }
  }
}

// 37 rows: the same 16-row chunks at 1 and 2 threads; 200: 64-row chunks at
// 1 thread, 32 at 2 (matmul.cpp gives each thread about four).
TEST(MatmulThreads, OneAndTwoThreadsAreBitIdentical) {
  ThreadPool two(2);
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx}) {
    if (!isa_available(isa)) continue;
    for (DType type : kTypes) {
      for (int64_t n_tokens : {1, 2, 3, 17})
      for (int64_t rows : {37, 200}) {
        const int64_t cols = 512;
        const auto m = random_matrix(type, rows, cols, 21);
        const auto x = random_activations(n_tokens, cols, 22);
        const auto one = run(isa, m.view, x, n_tokens, nullptr);
        const auto both = run(isa, m.view, x, n_tokens, &two);
        ASSERT_EQ(0, std::memcmp(one.data(), both.data(), one.size() * 4))
            << isa_name(isa) << " " << dtype_name(type) << " tokens " << n_tokens << " rows " << rows;
      }
    }
  }
}

// The float decode kernels group rows by their place in the range they are
// given (rows a quarter of the range apart stream together): a row's result
// must not depend on the range, whether it runs in a group or alone.
TEST(MatmulThreads, FloatDecodeRowsDoNotDependOnTheirRange) {
  using namespace matmul_impl;
  const int64_t rows = 75, cols = 320;
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (!isa_available(isa)) continue;
    for (DType type : {DType::F32, DType::F16, DType::BF16}) {
      const auto m = random_matrix(type, rows, cols, 31);
      for (int64_t n_tokens = 1; n_tokens <= 3; ++n_tokens) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::string(dtype_name(type)) + " tokens " + std::to_string(n_tokens));
        const Kernel kernel = own_kernel(isa, type, n_tokens);
        ASSERT_NE(kernel, nullptr);
        const auto x = random_activations(n_tokens, cols, uint32_t(60 + n_tokens));
        PreparedInput prepared(x.data(), n_tokens, cols);
        KernelArgs args;
        args.w = &m.view;
        args.x = prepared.for_type(type, nullptr, &args.x_stride);
        args.n_tokens = n_tokens;
        std::vector<float> whole(size_t(rows * n_tokens), NAN), pieces(whole.size(), NAN);
        args.y = whole.data();
        kernel(args, 0, rows);
        args.y = pieces.data();
        for (int64_t r0 = 0, len = 1; r0 < rows; r0 += len, len = len % 9 + 3) kernel(args, r0, std::min(rows, r0 + len));
        ASSERT_EQ(0, std::memcmp(whole.data(), pieces.data(), whole.size() * 4));
      }
    }
  }
}

TEST(Matmul, PreparedInputIsReusedAcrossMatrices) {
  const int64_t cols = 512, n_tokens = 3;
  const auto x = random_activations(n_tokens, cols, 1);
  PreparedInput prepared(x.data(), n_tokens, cols);
  for (DType type : {DType::Q4_0, DType::Q4_K, DType::Q8_0, DType::F16, DType::Q6_K}) {
    const auto m = random_matrix(type, 9, cols, 2);
    std::vector<float> shared(size_t(9 * n_tokens)), fresh(size_t(9 * n_tokens));
    matmul(m.view, prepared, shared.data(), nullptr);
    matmul(m.view, x.data(), n_tokens, fresh.data(), nullptr);
    EXPECT_EQ(shared, fresh) << dtype_name(type);
  }
}

// matmul_many runs the matrices in one job of the threads; each output must
// be what matmul gives it alone, to the bit, at any thread count: mixed
// types, panels (where they pay here) and rows, a matrix with no rows.
TEST(Matmul, ManyMatricesInOneJobGiveEachWhatMatmulGives) {
  const int64_t cols = 512;
  std::vector<test::RandomMatrix> kept;
  std::vector<std::vector<uint8_t>> panels;
  std::vector<MatrixView> views;
  uint32_t seed = 40;
  for (const auto& [type, rows] : std::vector<std::pair<DType, int64_t>>{
           {DType::Q4_K, 48}, {DType::Q6_K, 32}, {DType::Q4_0, 37}, {DType::F16, 20}, {DType::Q8_0, 0}, {DType::Q4_0, 64}}) {
    kept.push_back(random_matrix(type, rows, cols, ++seed));
    MatrixView v = kept.back().view;
    if (rows > 0 && panels_pay(v)) {
      panels.emplace_back(v.row_stride * size_t(rows));
      repack_panels(v, panels.back().data());
      v.data = panels.back().data();
      v.layout = WeightLayout::Panels16;
    }
    views.push_back(v);
  }
  ThreadPool two(2), three(3);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two, &three}) {
    for (int64_t n_tokens : {1, 3, 8}) {
      SCOPED_TRACE("threads " + std::to_string(pool ? pool->size() : 1) + " tokens " + std::to_string(n_tokens));
      const auto x = random_activations(n_tokens, cols, 50);
      PreparedInput prepared(x.data(), n_tokens, cols);
      std::vector<std::vector<float>> alone, together;
      std::vector<MatmulTarget> targets;
      for (const MatrixView& v : views) {
        alone.emplace_back(size_t(v.rows * n_tokens), NAN);
        together.emplace_back(size_t(v.rows * n_tokens), NAN);
        matmul(v, prepared, alone.back().data(), pool);
      }
      for (size_t i = 0; i < views.size(); ++i) targets.push_back({&views[i], together[i].data()});
      // With the next matrix to prefetch (the first's) or without: the same bits.
      matmul_many(targets, prepared, pool, n_tokens == 3 ? &views[0] : nullptr);
      for (size_t i = 0; i < views.size(); ++i) {
        if (!alone[i].empty()) {  // (memcmp is not for the null pointer of an empty vector)
          ASSERT_EQ(0, std::memcmp(alone[i].data(), together[i].data(), alone[i].size() * 4))
              << "matrix " << i << " " << dtype_name(views[i].type);
        }
      }
    }
  }
}

// TokenSums::AsOneToken: every token of a step gets, to the bit, what a
// one-token product gives it, for the Rows matrices (float types, rows not
// in whole groups of 16), alone and in matmul_many beside a panel matrix;
// a matrix above kOneTokenMaxBytes keeps the batched kernels.
TEST(Matmul, AsOneTokenGivesEachTokenItsOneTokenBits) {
  const int64_t cols = 512, n_tokens = 9;
  const auto x = random_activations(n_tokens, cols, 61);
  ThreadPool two(2);
  const auto panel_source = random_matrix(DType::Q4_0, 64, cols, 62);
  MatrixView panel = panel_source.view;
  std::vector<uint8_t> panel_bytes;
  if (panels_pay(panel)) {
    panel_bytes.resize(panel.row_stride * size_t(panel.rows));
    repack_panels(panel, panel_bytes.data());
    panel.data = panel_bytes.data();
    panel.layout = WeightLayout::Panels16;
  }
  for (const auto& [type, rows] : std::vector<std::pair<DType, int64_t>>{
           {DType::F32, 40}, {DType::F16, 24}, {DType::BF16, 8}, {DType::Q4_0, 37}, {DType::Q4_K, 20}, {DType::Q8_0, 5}}) {
    SCOPED_TRACE(std::string(dtype_name(type)) + " rows " + std::to_string(rows));
    const auto m = random_matrix(type, rows, cols, 63);
    std::vector<float> alone(size_t(rows * n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) matmul(m.view, x.data() + t * cols, 1, alone.data() + t * rows, &two);
    PreparedInput prepared(x.data(), n_tokens, cols, TokenSums::AsOneToken);
    EXPECT_TRUE(one_token_at_a_time(m.view, prepared));
    std::vector<float> step(alone.size(), NAN);
    matmul(m.view, prepared, step.data(), &two);
    EXPECT_EQ(0, std::memcmp(step.data(), alone.data(), alone.size() * 4));
    std::vector<float> beside(alone.size(), NAN), panel_out(size_t(panel.rows * n_tokens), NAN);
    const MatmulTarget targets[] = {{&panel, panel_out.data()}, {&m.view, beside.data()}};
    matmul_many(targets, prepared, &two);
    EXPECT_EQ(0, std::memcmp(beside.data(), alone.data(), alone.size() * 4));
  }
  MatrixView large = panel_source.view;  // its bytes are never read: only its size is asked
  large.rows = int64_t(kOneTokenMaxBytes / large.row_stride) + 16;
  PreparedInput prepared(x.data(), n_tokens, cols, TokenSums::AsOneToken);
  EXPECT_FALSE(one_token_at_a_time(large, prepared));
  PreparedInput fastest(x.data(), n_tokens, cols);
  EXPECT_FALSE(one_token_at_a_time(panel_source.view, fastest));
}

// What the threads prefetch of a matrix that comes next: the start of the
// share each takes first, at most 256 KiB of it, inside the matrix; nothing
// for one thread or no matrix. The product itself is unchanged by it.
TEST(Matmul, ThreadsPrefetchTheStartOfTheirShareOfTheNextMatrix) {
  const auto big = random_matrix(DType::Q8_0, 1000, 4096, 60), small = random_matrix(DType::Q4_0, 40, 64, 61);
  ThreadPool one(1), two(2), three(3);
  EXPECT_TRUE(matmul_prefetches(&big.view, nullptr).empty());
  EXPECT_TRUE(matmul_prefetches(&big.view, &one).empty());
  EXPECT_TRUE(matmul_prefetches(nullptr, &two).empty());
  for (ThreadPool* pool : {&two, &three}) {
    for (const MatrixView* w : {&big.view, &small.view}) {
      const auto got = matmul_prefetches(w, pool);
      ASSERT_EQ(got.size(), size_t(pool->size()));
      const auto* begin = static_cast<const uint8_t*>(w->data);
      const uint8_t* end = begin + w->row_stride * size_t(w->rows);
      int64_t last_row = -1;
      for (int i = 0; i < pool->size(); ++i) {
        const auto* at = static_cast<const uint8_t*>(got[size_t(i)].data);
        SCOPED_TRACE("thread " + std::to_string(i) + " of " + std::to_string(pool->size()));
        ASSERT_TRUE(at >= begin && at + got[size_t(i)].bytes <= end);
        ASSERT_EQ(0u, size_t(at - begin) % w->row_stride);
        EXPECT_LE(got[size_t(i)].bytes, size_t(256) << 10);
        EXPECT_GT(got[size_t(i)].bytes, 0u);
        // Shares start on row-group edges, thread 0's at the top, in thread order.
        const int64_t first_row = int64_t(size_t(at - begin) / w->row_stride);
        EXPECT_EQ(0, first_row % 16);
        if (i == 0) {
          EXPECT_EQ(0, first_row);
        }
        EXPECT_GT(first_row, last_row);
        last_row = first_row;
      }
    }
  }
  const auto x = random_activations(1, 4096, 62);
  std::vector<float> plain(1000), then(1000);
  matmul(big.view, x.data(), 1, plain.data(), &three);
  matmul(big.view, x.data(), 1, then.data(), &three, &big.view);
  EXPECT_EQ(0, std::memcmp(plain.data(), then.data(), plain.size() * 4));
}

TEST(Matmul, RejectsBadShapesAndTypes) {
  std::vector<uint8_t> bytes(4096);
  std::vector<float> x(256), y(16);
  EXPECT_THROW(matmul(MatrixView{DType::Q4_0, bytes.data(), 2, 48, 27}, x.data(), 1, y.data(), nullptr), Error);
  EXPECT_THROW(matmul(MatrixView{DType::Q8_K, bytes.data(), 1, 256, 292}, x.data(), 1, y.data(), nullptr), Error);
  EXPECT_THROW(matmul(MatrixView{DType::Q4_0, bytes.data(), 2, 64, 10}, x.data(), 1, y.data(), nullptr), Error);
  EXPECT_THROW(matmul(MatrixView{DType::F32, nullptr, 2, 64, 256}, x.data(), 1, y.data(), nullptr), Error);
  if (!isa_available(Isa::Avx512)) {
    PreparedInput p(x.data(), 1, 64);
    EXPECT_THROW(matmul_with_isa(Isa::Avx512, MatrixView{DType::F32, bytes.data(), 2, 64, 256}, p, y.data(), nullptr),
                 Error);
  }
}

// The reference kernels and the fast ones read the same activation bytes
// whichever quantizer made them.
TEST(MatmulActivations, FastQuantizersAreByteIdentical) {
  if (!isa_available(Isa::Avx2)) GTEST_SKIP() << "no AVX2: " << cpu_summary();
  using namespace matmul_impl;
  const int64_t cols = 1024;
  auto x = random_activations(3, cols, 9);
  x[7] = 1e-30f, x[8] = -9.0f, x[9] = 4.5f;  // tiny; block maximum; near a rounding tie
  std::fill(x.begin() + cols + 256, x.begin() + cols + 512, 0.0f);  // an all-zero block of either kind
  for (int64_t t = 0; t < 3; ++t) {
    std::vector<block_q8_32> a(cols / 32), b(cols / 32);
    quantize_act_q8_32(x.data() + t * cols, a.data(), cols);
    quantize_act_q8_32_avx2(x.data() + t * cols, b.data(), cols);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0]))) << "token " << t;
    std::vector<block_q8_K> c(cols / QK_K), e(cols / QK_K);
    quantize_act_q8_k(x.data() + t * cols, c.data(), cols);
    quantize_act_q8_k_avx2(x.data() + t * cols, e.data(), cols);
    EXPECT_EQ(0, std::memcmp(c.data(), e.data(), c.size() * sizeof(c[0]))) << "token " << t;
    if (isa_available(Isa::Avx512)) {
      quantize_act_q8_32_avx512(x.data() + t * cols, b.data(), cols);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0]))) << "avx512 token " << t;
      quantize_act_q8_k_avx512(x.data() + t * cols, e.data(), cols);
      EXPECT_EQ(0, std::memcmp(c.data(), e.data(), c.size() * sizeof(c[0]))) << "avx512 token " << t;
    }
    if (t == 0) {
      EXPECT_EQ(a[0].qs[8], -127) << "the block maximum maps to ±127";
    }
  }
  // Q8_32 rows whose blocks do not fill the AVX-512 quantizer's groups of 16
  // (Qwen2-0.5B's 896 columns: 28 blocks).
  if (!isa_available(Isa::Avx512)) return;
  for (const int64_t short_cols : {int64_t(32), int64_t(896), int64_t(1056)}) {
    const auto y = random_activations(1, short_cols, 10);
    std::vector<block_q8_32> a(size_t(short_cols / 32)), b(a.size());
    quantize_act_q8_32(y.data(), a.data(), short_cols);
    quantize_act_q8_32_avx512(y.data(), b.data(), short_cols);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0]))) << short_cols << " columns";
  }
}

// F16/BF16 weights read activations rounded to their precision; the AVX2
// rounding gives the scalar one's bits: ties either way, F16 subnormals and
// overflow, infinities and NaNs, and a tail past the vectors.
TEST(MatmulActivations, FastRoundingToF16AndBF16IsBitIdentical) {
  if (!isa_available(Isa::Avx2)) GTEST_SKIP() << "no AVX2: " << cpu_summary();
  using namespace matmul_impl;
  auto x = random_activations(1, 203, 11);
  const uint32_t patterns[] = {0x3f808000, 0x3f818000, 0x3f80ffff, 0xbf817fff, 0x7f800000, 0xff800000,
                               0x7fc00001, 0x7f800001, 0xffa12345, 0x00000001, 0x3f801000, 0x3f803000,
                               0x33800000, 0x387fe000, 0x477ff000, 0x477fefff, 0x00800000, 0x80000000};
  for (size_t i = 0; i < std::size(patterns); ++i) std::memcpy(&x[5 * i], &patterns[i], 4);
  x[100] = 70000.0f, x[101] = 1e-6f, x[102] = -3e-8f;
  for (const bool f16 : {true, false}) {
    std::vector<float> scalar(x.size()), fast(x.size());
    (f16 ? round_act_f16 : round_act_bf16)(x.data(), scalar.data(), int64_t(x.size()));
    (f16 ? round_act_f16_avx2 : round_act_bf16_avx2)(x.data(), fast.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(scalar[i]), std::bit_cast<uint32_t>(fast[i]))
          << (f16 ? "f16 " : "bf16 ") << "element " << i << " bits " << std::hex << std::bit_cast<uint32_t>(x[i]);
  }
}

TEST(Matmul, ZeroTokensOrRowsIsANoOp) {
  const auto m = random_matrix(DType::Q4_0, 4, 64, 3);
  std::vector<float> x(64, 1.0f), y(4, -1.0f);
  matmul(m.view, x.data(), 0, y.data(), nullptr);
  EXPECT_EQ(y[0], -1.0f);
}

}  // namespace
}  // namespace shardlm
