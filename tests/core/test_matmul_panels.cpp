// Weights repacked as 16-row panels (WeightLayout::Panels16): the layout
// round-trips, every ISA's kernel on panels matches the scalar reference for
// 1 to 40 tokens, panels give the bits of the GGUF-row kernels for 4+ tokens,
// the AMX batch tile gives the VNNI one_pass's bits at batch sizes where
// matmul() does not pick it, the timed choices (prefetches, activation loads)
// do not change a bit, and a token's result is the same bits alone (decode) as in any batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/bench_matrix.h"
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
using test::run;

const DType kPanelTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                             DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
const Isa kIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx};

struct Panels {
  std::vector<uint8_t> bytes;
  MatrixView view;
};
Panels repacked(const MatrixView& m) {
  Panels p;
  p.bytes.assign(m.row_stride * size_t(m.rows), 0);
  repack_panels(m, p.bytes.data());
  p.view = m;
  p.view.data = p.bytes.data();
  p.view.layout = WeightLayout::Panels16;
  return p;
}

std::vector<float> run_default(const MatrixView& w, const float* x, int64_t n_tokens, ThreadPool* pool) {
  std::vector<float> y(size_t(n_tokens * w.rows), NAN);
  matmul(w, x, n_tokens, y.data(), pool);
  return y;
}

TEST(MatmulPanels, RepackRoundTrips) {
  for (DType type : kPanelTypes) {
    const auto m = random_matrix(type, 48, 256, 3);
    const Panels p = repacked(m.view);
    EXPECT_NE(0, std::memcmp(p.bytes.data(), m.bytes.data(), m.bytes.size())) << dtype_name(type);
    std::vector<uint8_t> group(16 * m.view.row_stride);
    for (int64_t g = 0; g < 3; ++g) {
      unpack_panel_group(p.view, g, group.data());
      ASSERT_EQ(0, std::memcmp(group.data(), m.view.row(16 * g), group.size())) << dtype_name(type) << " group " << g;
    }
    std::vector<uint8_t> row(m.view.row_stride);
    for (int64_t r = 0; r < 48; ++r) {
      read_panel_row(p.view, r, row.data());
      ASSERT_EQ(0, std::memcmp(row.data(), m.view.row(r), row.size())) << dtype_name(type) << " row " << r;
    }
    EXPECT_THROW(read_panel_row(p.view, 48, row.data()), Error);
  }
}

TEST(MatmulPanels, RefusesShapesWithoutWholeGroups) {
  const auto odd = random_matrix(DType::Q4_0, 20, 256, 1);
  std::vector<uint8_t> out(odd.bytes.size());
  EXPECT_FALSE(panels_pay(odd.view));
  EXPECT_THROW(repack_panels(odd.view, out.data()), Error);
  const auto no_layout = random_matrix(DType::F16, 32, 256, 1);
  EXPECT_FALSE(panels_pay(no_layout.view));
  std::vector<uint8_t> no_layout_out(no_layout.bytes.size());
  EXPECT_THROW(repack_panels(no_layout.view, no_layout_out.data()), Error);
  // Every type with the layout has an AVX2 panel kernel (and a VNNI one).
  for (DType type : kPanelTypes) {
    const auto fine = random_matrix(type, 32, 256, 1);
    EXPECT_EQ(panels_pay(fine.view), active_isa() >= Isa::Avx2) << dtype_name(type);
  }
}

TEST(MatmulPanels, EveryIsaMatchesReference) {
  ThreadPool pool(2);
  const int64_t rows = 48, cols = 512;
  for (DType type : kPanelTypes) {
    const auto m = random_matrix(type, rows, cols, 11);
    const Panels p = repacked(m.view);
    for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 16, 23, 40}) {
      const auto x = random_activations(n, cols, uint32_t(n));
      const auto ref = run(Isa::Scalar, m.view, x.data(), n, nullptr);
      for (Isa isa : kIsas) {
        if (!isa_available(isa)) continue;
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::string(dtype_name(type)) + " tokens " + std::to_string(n));
        const auto got = run(isa, p.view, x.data(), n, &pool);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const double mag = abs_dot(m.dequantized.data() + r * cols, x.data() + t * cols, cols);
            const size_t i = size_t(t * rows + r);
            ASSERT_NEAR(got[i], ref[i], 4e-5 * mag + 1e-30) << "row " << r << " token " << t;
          }
        // 4+ tokens: the tiles on panels are the tiles on GGUF rows.
        if (n >= 4 && matmul_impl::panel_isa(isa, type, n) == isa && isa != Isa::Scalar) {
          const auto rows_layout = run(isa, m.view, x.data(), n, nullptr);
          ASSERT_EQ(0, std::memcmp(got.data(), rows_layout.data(), got.size() * 4));
        }
      }
    }
  }
}

// The AMX panel kernel at every batch size it may be given (matmul() picks it
// only above kPanelOnePassTokens), on rows whose blocks do not fill its
// pipeline's last step: the scalar reference's values and the VNNI panel
// kernel's bits.
TEST(MatmulPanels, AmxBatchTileMatchesVnniBits) {
  if (!isa_available(Isa::Amx)) GTEST_SKIP() << "no AMX here";
  const int64_t rows = 32;
  for (DType type : kPanelTypes) {
    const matmul_impl::Kernel amx = matmul_impl::amx_panel_kernel(type);
    if (!amx) continue;
    const int64_t block = traits(type).block_elems;
    for (int64_t cols : {block * 5, block * 6, block * 17}) {
      const auto m = random_matrix(type, rows, cols, 21);
      const Panels p = repacked(m.view);
      for (int64_t n : {4, 8, 12}) {
        SCOPED_TRACE(std::string(dtype_name(type)) + " cols " + std::to_string(cols) + " tokens " + std::to_string(n));
        const auto x = random_activations(n, cols, uint32_t(n + cols));
        const auto ref = run(Isa::Scalar, m.view, x.data(), n, nullptr);
        std::vector<float> vnni(size_t(n * rows), NAN), got(size_t(n * rows), NAN);
        PreparedInput prepared(x.data(), n, cols);
        matmul_impl::KernelArgs args;
        args.w = &p.view;
        args.x = prepared.for_type(type, nullptr, &args.x_stride);
        args.n_tokens = n;
        args.y = got.data();
        amx(args, 0, rows);
        args.y = vnni.data();
        matmul_impl::avx512_panel_kernel(type)(args, 0, rows);
        for (size_t i = 0; i < got.size(); ++i) {
          const size_t t = i / size_t(rows), r = i % size_t(rows);
          const double mag = abs_dot(m.dequantized.data() + r * size_t(cols), x.data() + t * size_t(cols), cols);
          ASSERT_NEAR(got[i], ref[i], 4e-5 * mag + 1e-30) << "row " << r << " token " << t;
        }
        ASSERT_EQ(0, std::memcmp(got.data(), vnni.data(), got.size() * 4));
      }
    }
  }
}

// What `kernel` writes for rows [0, rows) with `args` as set(args) leaves them.
template <class Set>
std::vector<float> kernel_output(matmul_impl::Kernel kernel, matmul_impl::KernelArgs args, int64_t rows, Set set) {
  std::vector<float> y(size_t(args.n_tokens * rows), NAN);
  args.y = y.data();
  set(args);
  kernel(args, 0, rows);
  return y;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The prefetches are timed per CPU (matmul_prefetch_plan.cpp), and with them
// where the K-quant one_pass makes its codes and how many streams it reads,
// so none may touch the arithmetic: each plan, place and stream count gives
// the same bits with every panel kernel, at every token count it streams
// (one_pass, the AMX batch tile). 3 row groups: two streams walk two of
// them in step, the third alone.
TEST(MatmulPanels, EveryPrefetchPlanDistanceKQuantCodesAndStreamCountGiveTheSameBits) {
  using matmul_impl::KQuantCodes;
  using matmul_impl::PanelPrefetchPlan;
  const PanelPrefetchPlan plans[] = {PanelPrefetchPlan::kPageStarts, PanelPrefetchPlan::kLinesToL1,
                                     PanelPrefetchPlan::kLinesToL2, PanelPrefetchPlan::kSpreadToL1,
                                     PanelPrefetchPlan::kSpreadToL2};
  const int64_t rows = 48;
  for (Isa isa : kIsas) {
    if (isa == Isa::Scalar || !isa_available(isa)) continue;
    for (DType type : kPanelTypes) {
      const int64_t cols = traits(type).block_elems * 9;
      const auto m = random_matrix(type, rows, cols, 5);
      const Panels p = repacked(m.view);
      for (int64_t n : {1, 2, 3, 4, 8, 12}) {
        if (matmul_impl::panel_isa(isa, type, n) != isa) continue;
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::string(dtype_name(type)) + " tokens " + std::to_string(n));
        const auto x = random_activations(n, cols, uint32_t(n));
        PreparedInput prepared(x.data(), n, cols);
        matmul_impl::KernelArgs args;
        args.w = &p.view;
        args.x = prepared.for_type(type, nullptr, &args.x_stride);
        args.n_tokens = n;
        std::vector<std::vector<float>> y;
        for (auto plan : plans)
          for (auto codes : {KQuantCodes::kInPlace, KQuantCodes::kThroughPanel})
            for (size_t ahead : {matmul_impl::kPrefetchAheadFar, matmul_impl::kPrefetchAheadNear})
              for (int streams : {1, 2})
                y.push_back(kernel_output(matmul_impl::panel_kernel(isa, type, n), args, rows, [&](auto& a) {
                  a.prefetch = plan;
                  a.kquant_codes = codes;
                  a.prefetch_ahead = ahead;
                  a.streams = streams;
                }));
        for (size_t i = 1; i < y.size(); ++i) ASSERT_TRUE(same_bits(y[0], y[i]));
        ASSERT_FALSE(std::isnan(y[0][0]));
      }
    }
  }
  // Decode's plan and its distance are timed (the reason gives the
  // timings); prefill's are fixed.
  if (isa_available(Isa::Avx2)) {
    matmul_impl::panel_streaming(Isa::Avx2, DType::Q4_0, 1);
    const std::string why = matmul_impl::panel_prefetch_reason(Isa::Avx2, DType::Q4_0, 1);
    EXPECT_NE(std::string::npos, why.find("2 KiB ahead")) << why;
    EXPECT_NE(std::string::npos, why.find("8 KiB ahead")) << why;
  }
  EXPECT_EQ(PanelPrefetchPlan::kLinesToL1, matmul_impl::panel_streaming(Isa::Avx512, DType::Q4_0, 64).plan);
  EXPECT_EQ(matmul_impl::kPrefetchAheadFar, matmul_impl::panel_streaming(Isa::Avx512, DType::Q4_0, 64).ahead);
  // The codes are timed with the plan where the VNNI one_pass has the choice.
  if (isa_available(Isa::Avx512) && matmul_impl::avx512_panel_kernel(DType::Q6_K)) {
    matmul_impl::panel_streaming(Isa::Avx512, DType::Q6_K, 4);
    EXPECT_NE(std::string::npos, matmul_impl::panel_prefetch_reason(Isa::Avx512, DType::Q6_K, 4).find("codes in place"));
  }
  // So is the stream count at one token; more tokens of the VNNI one_pass
  // start from it, the tiles (prefill) read one.
  if (isa_available(Isa::Avx512) && matmul_impl::avx512_panel_kernel(DType::Q4_0)) {
    const int streams = matmul_impl::panel_streaming(Isa::Avx512, DType::Q4_0, 1).streams;
    EXPECT_NE(std::string::npos, matmul_impl::panel_prefetch_reason(Isa::Avx512, DType::Q4_0, 1).find("/ 2 streams"));
    matmul_impl::panel_streaming(Isa::Avx512, DType::Q4_0, 4);
    EXPECT_NE(std::string::npos, matmul_impl::panel_prefetch_reason(Isa::Avx512, DType::Q4_0, 4)
                                     .find("read as " + std::to_string(streams) + " stream"));
    EXPECT_NE(std::string::npos,
              matmul_impl::panel_prefetch_reason(Isa::Avx512, DType::Q4_0, 4).find("(as at one token)"));
    EXPECT_EQ(1, matmul_impl::panel_streaming(Isa::Avx512, DType::Q4_0, 64).streams);
  }
  EXPECT_EQ(KQuantCodes::kInPlace, matmul_impl::panel_streaming(Isa::Avx512, DType::Q6_K, 1).codes);
  EXPECT_EQ(KQuantCodes::kThroughPanel, matmul_impl::panel_streaming(Isa::Avx512, DType::Q6_K, 12).codes);
}

// SHARDLM_PREFETCH pins one plan for every decode matrix (benchmarks that
// compare kernels, not each process's timing); anything else it says is an
// error. The choice is made once per process: each case runs in a child.
int pinned_plan_with_env(const char* value) {
  setenv("SHARDLM_PREFETCH", value, 1);
  try {
    const matmul_impl::PanelStreaming s = matmul_impl::panel_streaming(Isa::Avx2, DType::Q6_K, 4);
    if (matmul_impl::panel_prefetch_reason(Isa::Avx2, DType::Q6_K, 4) != "SHARDLM_PREFETCH") return 41;
    if (matmul_impl::panel_streaming(Isa::Avx2, DType::Q4_0, 1).plan != s.plan) return 41;
    return int(s.plan);
  } catch (const Error&) {
    return 42;
  }
}

TEST(MatmulPanelsDeathTest, EnvironmentPinsThePrefetchPlan) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  using matmul_impl::PanelPrefetchPlan;
  const int spread_l2 = int(PanelPrefetchPlan::kSpreadToL2), page_starts = int(PanelPrefetchPlan::kPageStarts);
  EXPECT_EXIT(std::exit(pinned_plan_with_env("spread-l2")), testing::ExitedWithCode(spread_l2), "");
  EXPECT_EXIT(std::exit(pinned_plan_with_env("page-starts")), testing::ExitedWithCode(page_starts), "");
  EXPECT_EXIT(std::exit(pinned_plan_with_env("l3")), testing::ExitedWithCode(42), "");
}

// The AVX2 panel kernels of the 32-element types in their AVX-VNNI form sum
// the same integers as with maddubs: the same bits at every token count, for
// decode, batched decode and the prefill tiles (a CPU without AVX-VNNI runs
// only the maddubs form, and this test has nothing to compare).
TEST(MatmulPanels, AvxVnniFormGivesTheMaddubsBits) {
  if (!cpu_caps().avx_vnni) GTEST_SKIP() << "no AVX-VNNI: " << cpu_summary();
  const int64_t rows = 48, cols = 32 * 9;
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    const auto m = random_matrix(type, rows, cols, 7);
    const Panels p = repacked(m.view);
    for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 16, 21}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " tokens " + std::to_string(n));
      const auto x = random_activations(n, cols, uint32_t(n + 11));
      PreparedInput prepared(x.data(), n, cols);
      matmul_impl::KernelArgs args;
      args.w = &p.view;
      args.x = prepared.for_type(type, nullptr, &args.x_stride);
      args.n_tokens = n;
      const auto keep = [](auto&) {};
      const auto vnni = kernel_output(matmul_impl::avx2_panel_kernel(type, true), args, rows, keep);
      const auto maddubs = kernel_output(matmul_impl::avx2_panel_kernel(type, false), args, rows, keep);
      ASSERT_FALSE(std::isnan(vnni[0]));
      ASSERT_TRUE(same_bits(vnni, maddubs));
    }
  }
}

// The activation loads are timed per CPU too (matmul_activation_loads.cpp):
// both give the same bits at every token count the VNNI one_pass takes, on
// panels and on GGUF rows (its gathered groups from 4 tokens).
TEST(MatmulPanels, EveryActivationLoadGivesTheSameBits) {
  using matmul_impl::ActivationLoads;
  if (!isa_available(Isa::Avx512) || !matmul_impl::avx512_panel_kernel(DType::Q4_0)) GTEST_SKIP() << "no VNNI";
  const int64_t rows = 48;
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    const int64_t cols = 32 * 9;
    const auto m = random_matrix(type, rows, cols, 6);
    const Panels p = repacked(m.view);
    for (int64_t n = 2; n <= matmul_impl::kPanelOnePassTokens; ++n) {
      const auto x = random_activations(n, cols, uint32_t(n));
      PreparedInput prepared(x.data(), n, cols);
      for (const MatrixView* w : {&p.view, &m.view}) {
        const bool panels = w->layout == WeightLayout::Panels16;
        if (!panels && n < matmul_impl::kGemmMinTokens) continue;
        SCOPED_TRACE(std::string(dtype_name(type)) + (panels ? " panels" : " rows") + " tokens " + std::to_string(n));
        const matmul_impl::Kernel kernel = panels ? matmul_impl::panel_kernel(Isa::Avx512, type, n)
                                                  : matmul_impl::own_kernel(Isa::Avx512, type, n);
        matmul_impl::KernelArgs args;
        args.w = w;
        args.x = prepared.for_type(type, nullptr, &args.x_stride);
        args.n_tokens = n;
        const auto spread = kernel_output(kernel, args, rows, [](auto& a) { a.activations = ActivationLoads::kSpreadQuad; });
        for (int streams : {1, 2})
          ASSERT_TRUE(same_bits(spread, kernel_output(kernel, args, rows, [&](auto& a) {
                                  a.activations = ActivationLoads::kBroadcast;
                                  a.streams = streams;
                                })));
        ASSERT_FALSE(std::isnan(spread[0]));
      }
    }
  }
  // Timed where one_pass has the choice (the reason gives the timings), fixed elsewhere.
  matmul_impl::activation_loads(Isa::Avx512, DType::Q4_0, 8);
  EXPECT_NE(std::string::npos, matmul_impl::activation_loads_reason(Isa::Avx512, DType::Q4_0, 8).find(" us"));
  EXPECT_EQ(ActivationLoads::kSpreadQuad, matmul_impl::activation_loads(Isa::Avx512, DType::Q4_0, 1));
  EXPECT_EQ(ActivationLoads::kSpreadQuad, matmul_impl::activation_loads(Isa::Avx512, DType::Q4_K, 8));
  EXPECT_EQ(ActivationLoads::kSpreadQuad, matmul_impl::activation_loads(Isa::Avx512, DType::Q4_0, 12));
}

// What the serving layer relies on, now down to one token: a sequence's
// result is the same bits decoded alone, among 2..39 others, or by 2 threads,
// with every ISA's panel kernels (the default's, matmul(), among them).
// 160 rows: threads claim 32- or 48-row chunks, so 40 tokens run the VNNI
// pair tiles (two row groups at a time).
TEST(MatmulPanels, TokenResultDoesNotDependOnItsBatch) {
  ThreadPool two(2);
  const int64_t rows = 160, cols = 512, n_tokens = 40;
  for (Isa isa : kIsas) {
    if (isa == Isa::Scalar || !isa_available(isa)) continue;
    for (DType type : kPanelTypes) {
      if (matmul_impl::panel_isa(isa, type, 1) != isa && matmul_impl::panel_isa(isa, type, n_tokens) != isa) continue;
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::string(dtype_name(type)));
      const auto m = random_matrix(type, rows, cols, 8);
      const Panels p = repacked(m.view);
      const auto x = random_activations(n_tokens, cols, 9);
      const auto whole = run(isa, p.view, x.data(), n_tokens, nullptr);
      const auto threaded = run(isa, p.view, x.data(), n_tokens, &two);
      ASSERT_EQ(0, std::memcmp(whole.data(), threaded.data(), whole.size() * 4));
      // Every one_pass token count (their vpdpbusd chains differ), then AMX / tiles.
      const int64_t splits[] = {0, 1, 3, 6, 10, 15, 21, 28, 36, 40};  // batches of 1, 2, ..., 8, 4
      for (size_t s = 0; s + 1 < std::size(splits); ++s) {
        const int64_t t0 = splits[s], n = splits[s + 1] - t0;
        const auto part = run(isa, p.view, x.data() + t0 * cols, n, &two);
        ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + t0 * rows, part.size() * 4))
            << "tokens " << t0 << ".." << t0 + n;
      }
    }
  }
  if (panels_pay(random_matrix(DType::Q4_0, rows, cols, 8).view)) {  // matmul() runs the active ISA's panel kernels
    const auto m = random_matrix(DType::Q4_0, rows, cols, 8);
    const Panels p = repacked(m.view);
    const auto x = random_activations(3, cols, 9);
    EXPECT_EQ(run_default(p.view, x.data(), 3, &two), run(active_isa(), p.view, x.data(), 3, &two));
  }
}

// The planner's kernel rates and `bench kernels` time make_model_bench_matrix:
// it must be the panels a model gets here, holding the same matrix.
TEST(MatmulPanels, ModelBenchMatrixIsTheModelsLayout) {
  const int64_t rows = 64, cols = 512, n = 8;
  for (DType type : kPanelTypes) {
    const BenchMatrix rows_layout = make_bench_matrix(type, rows, cols);
    const BenchMatrix model = make_model_bench_matrix(type, rows, cols);
    ASSERT_EQ(model.view.layout == WeightLayout::Panels16, panels_pay(rows_layout.view)) << dtype_name(type);
    if (model.view.layout != WeightLayout::Panels16) continue;
    const auto x = random_activations(n, cols, 5);
    const Isa isa = active_isa();
    ASSERT_EQ(run(isa, model.view, x.data(), n, nullptr), run(isa, rows_layout.view, x.data(), n, nullptr))
        << dtype_name(type);
  }
}

}  // namespace
}  // namespace shardlm
