// ops::argmax and ops::find_above: every path against the reference on random
// rows with planted ties, -inf and NaN, at lengths around each path's vector
// and unroll widths.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/ops.h"
#include "core/ops_impl.h"

namespace shardlm::ops {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using ArgmaxFn = int64_t (*)(const float*, int64_t);

std::vector<std::pair<const char*, ArgmaxFn>> fast_paths() {
  std::vector<std::pair<const char*, ArgmaxFn>> paths;
  if (isa_available(Isa::Avx2)) paths.emplace_back("avx2", avx2::argmax);
  if (isa_available(Isa::Avx512)) paths.emplace_back("avx512", avx512::argmax);
  paths.emplace_back("dispatch", ops::argmax);
  return paths;
}

void expect_all_paths(const std::vector<float>& x, const char* what) {
  const int64_t want = ref::argmax(x.data(), int64_t(x.size()));
  for (const auto& [name, fn] : fast_paths())
    ASSERT_EQ(fn(x.data(), int64_t(x.size())), want) << name << ", " << what << ", length " << x.size();
}

TEST(OpsArgmax, ReferenceHandWorked) {
  const std::vector<float> ties{1, 5, 2, 5}, nan_first{kNaN, -1, 3, kNaN, 3}, all_low{-kInf, kNaN, -kInf};
  EXPECT_EQ(ref::argmax(ties.data(), 4), 1);
  EXPECT_EQ(ref::argmax(nan_first.data(), 5), 2);
  EXPECT_EQ(ref::argmax(all_low.data(), 3), 0);
  EXPECT_EQ(ref::argmax(ties.data(), 0), 0);
}

TEST(OpsArgmax, FastPathsMatchReference) {
  std::mt19937 rng(11);
  for (const int64_t n : {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 128256}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      // Few distinct values, so the maximum repeats across lanes and vectors.
      std::uniform_int_distribution<int> coarse(-20, 20);
      for (auto& v : x) v = trial % 2 ? float(coarse(rng)) : std::normal_distribution<float>(0, 4)(rng);
      expect_all_paths(x, "random");
      if (n == 0) continue;
      std::uniform_int_distribution<int64_t> at(0, n - 1);
      for (int k = 0; k < 3; ++k) x[size_t(at(rng))] = kNaN;
      expect_all_paths(x, "with NaNs");
      const float top = 1000.f;
      x[size_t(at(rng))] = top;
      x[size_t(at(rng))] = top;
      x[size_t(n - 1)] = top;
      expect_all_paths(x, "planted ties");
      for (size_t i = 0; i < x.size(); ++i) x[i] = trial % 3 == 0 || (trial % 3 == 2 && i % 2) ? -kInf : kNaN;
      expect_all_paths(x, "nothing above -inf");
      x.assign(size_t(n), 0.f);
      x[size_t(n - 1)] = kInf;
      expect_all_paths(x, "+inf last");
    }
  }
}

TEST(OpsFindAbove, FastPathsMatchReference) {
  using FindFn = int64_t (*)(const float*, int64_t, float);
  std::vector<std::pair<const char*, FindFn>> paths;
  if (isa_available(Isa::Avx2)) paths.emplace_back("avx2", avx2::find_above);
  if (isa_available(Isa::Avx512)) paths.emplace_back("avx512", avx512::find_above);
  paths.emplace_back("dispatch", ops::find_above);
  std::mt19937 rng(5);
  for (const int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      std::uniform_int_distribution<int> coarse(-20, 20);
      for (auto& v : x) v = float(coarse(rng));
      for (auto& v : x)
        if (rng() % 7 == 0) v = trial % 2 ? kNaN : -kInf;
      // Floors that nothing, something rare, and most values beat.
      for (const float floor : {100.f, 19.f, 15.f, 0.f, -kInf, float(coarse(rng))}) {
        const int64_t want = ref::find_above(x.data(), n, floor);
        for (const auto& [name, fn] : paths)
          ASSERT_EQ(fn(x.data(), n, floor), want) << name << ", length " << n << ", floor " << floor;
      }
    }
  }
  const std::vector<float> x{kNaN, 1, 3, 2};
  EXPECT_EQ(ref::find_above(x.data(), 4, 2.f), 2);
  EXPECT_EQ(ref::find_above(x.data(), 4, 3.f), 4);
  EXPECT_EQ(ref::find_above(x.data(), 4, -kInf), 1);
}

}  // namespace
}  // namespace shardlm::ops
