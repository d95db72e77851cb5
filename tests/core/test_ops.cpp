// Small ops: hand-worked values for the reference, AVX2 against the reference
// (and AVX-512 against AVX2) on awkward lengths, and RoPE geometry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/ops_impl.h"
#include "test_matmul_util.h"

namespace shardlm::ops {
namespace {

using test::random_vector;

TEST(OpsRef, HandWorkedValues) {
  const float x[2] = {3.f, 4.f};
  const float w[2] = {1.f, 2.f};
  float out[2];
  ref::rms_norm(x, w, 2, 0.f, out);  // rms = sqrt(12.5)
  EXPECT_NEAR(out[0], 3.f / std::sqrt(12.5f), 1e-6);
  EXPECT_NEAR(out[1], 8.f / std::sqrt(12.5f), 1e-6);

  float s[3] = {0.f, std::log(2.f), -std::numeric_limits<float>::infinity()};
  ref::softmax(s, 3);
  EXPECT_NEAR(s[0], 1.f / 3, 1e-7);
  EXPECT_NEAR(s[1], 2.f / 3, 1e-7);
  EXPECT_EQ(s[2], 0.f);

  const float g[3] = {0.f, 100.f, -100.f};
  const float u[3] = {5.f, 2.f, 1.f};
  float a[3];
  ref::swiglu(g, u, a, 3);
  EXPECT_EQ(a[0], 0.f);
  EXPECT_EQ(a[1], 200.f);
  EXPECT_NEAR(a[2], 0.f, 1e-30);
  ref::silu(g, a, 1);
  EXPECT_EQ(a[0], 0.f);

  float y[2] = {1.f, 1.f};
  axpy(2.f, x, y, 2);
  EXPECT_EQ(y[0], 7.f);
  EXPECT_EQ(y[1], 9.f);
  scale(y, 0.5f, 2);
  EXPECT_EQ(y[1], 4.5f);
  EXPECT_EQ(dot(x, w, 2), 11.f);
  add(x, w, y, 2);
  EXPECT_EQ(y[1], 6.f);
  mul(x, w, y, 2);
  EXPECT_EQ(y[1], 8.f);
}

TEST(OpsRef, RmsNormWithoutWeightHasUnitRms) {
  auto x = random_vector(1000, 1);
  ref::rms_norm(x.data(), nullptr, 1000, 1e-5f, x.data());  // in place
  double sum_sq = 0;
  for (float v : x) sum_sq += double(v) * v;
  EXPECT_NEAR(std::sqrt(sum_sq / 1000), 1.0, 1e-5);
}

class OpsAvx2 : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    if (!isa_available(Isa::Avx2)) GTEST_SKIP() << "CPU lacks AVX2/FMA";
  }
};

// Relative to the larger magnitude, with an absolute floor for values near 0.
void expect_close(const std::vector<float>& want, const std::vector<float>& got, float rel, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::max(1.f, std::fabs(want[i]))) << what << " at " << i << " of " << want.size();
}

TEST_P(OpsAvx2, RmsNormMatchesReference) {
  const int64_t n = GetParam();
  const auto x = random_vector(n, 2), w = random_vector(n, 3, 1.f);
  std::vector<float> want(x.size()), got(x.size()), in_place = x;
  ref::rms_norm(x.data(), w.data(), n, 1e-5f, want.data());
  avx2::rms_norm(x.data(), w.data(), n, 1e-5f, got.data());
  expect_close(want, got, 2e-6f, "rms_norm");
  avx2::rms_norm(in_place.data(), w.data(), n, 1e-5f, in_place.data());
  expect_close(want, in_place, 2e-6f, "rms_norm in place");
  ref::rms_norm(x.data(), nullptr, n, 1e-5f, want.data());
  avx2::rms_norm(x.data(), nullptr, n, 1e-5f, got.data());
  expect_close(want, got, 2e-6f, "rms_norm unweighted");
}

TEST_P(OpsAvx2, SoftmaxMatchesReference) {
  const int64_t n = GetParam();
  auto x = random_vector(n, 4, 10.f);
  // Masked positions, as causal attention writes them.
  for (int64_t i = 1; i < n; i += 3) x[size_t(i)] = -std::numeric_limits<float>::infinity();
  auto want = x, got = x;
  ref::softmax(want.data(), n);
  avx2::softmax(got.data(), n);
  expect_close(want, got, 1e-6f, "softmax");
  double sum = 0;
  for (float v : got) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST_P(OpsAvx2, ActivationsMatchReference) {
  const int64_t n = GetParam();
  auto g = random_vector(n, 5, 6.f);
  if (n > 2) {  // the exp's clamps and overflow
    g[0] = 95.f;
    g[1] = -95.f;
  }
  const auto u = random_vector(n, 6);
  std::vector<float> want(g.size()), got(g.size());
  ref::silu(g.data(), want.data(), n);
  avx2::silu(g.data(), got.data(), n);
  expect_close(want, got, 1e-6f, "silu");
  ref::swiglu(g.data(), u.data(), want.data(), n);
  avx2::swiglu(g.data(), u.data(), got.data(), n);
  expect_close(want, got, 1e-6f, "swiglu");
  if (!isa_available(Isa::Avx512)) return;
  // AVX-512 does AVX2's arithmetic on twice the lanes: the same bits.
  std::vector<float> wide(g.size());
  avx2::silu(g.data(), got.data(), n);
  avx512::silu(g.data(), wide.data(), n);
  EXPECT_EQ(got, wide) << "silu";
  avx2::swiglu(g.data(), u.data(), got.data(), n);
  avx512::swiglu(g.data(), u.data(), wide.data(), n);
  EXPECT_EQ(got, wide) << "swiglu";
}

TEST_P(OpsAvx2, ElementwiseAndDotMatchReference) {
  const int64_t n = GetParam();
  const auto a = random_vector(n, 7), b = random_vector(n, 8);
  std::vector<float> want(a.size()), got(a.size());
  ref::add(a.data(), b.data(), want.data(), n);
  avx2::add(a.data(), b.data(), got.data(), n);
  EXPECT_EQ(want, got);
  ref::mul(a.data(), b.data(), want.data(), n);
  avx2::mul(a.data(), b.data(), got.data(), n);
  EXPECT_EQ(want, got);
  double magnitude = 0;
  for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(double(a[size_t(i)]) * b[size_t(i)]);
  EXPECT_NEAR(avx2::dot(a.data(), b.data(), n), ref::dot(a.data(), b.data(), n), 1e-6 * magnitude + 1e-6);
}

// Below, at and past the vector width, the 4×8 unroll and a long row.
INSTANTIATE_TEST_SUITE_P(Lengths, OpsAvx2, ::testing::Values(1, 7, 8, 9, 31, 33, 64, 100, 4097));

// Grouped-query attention: 1-16 query heads over one K/V head, head sizes
// below, at and past the register blocks (AVX-512: multiples of 16 up to
// latent attention's 576 / 512), 1 to 301 positions (every remainder of the
// 4-position steps), rows padded (strides larger than the head, as in the KV
// cache); f32 and f16 caches; AVX2 and AVX-512 against the reference, in
// either sum order (in the blocks' order, the two ISAs' bits alike).
TEST(OpsAvx2Attention, MatchesReference) {
  if (!isa_available(Isa::Avx2)) GTEST_SKIP() << "CPU lacks AVX2/FMA";
  struct Shape { int64_t n_q, dim_k, dim_v, n_pos; };
  for (const bool f16 : {false, true}) {
    for (const Shape sh : {Shape{1, 64, 64, 1}, Shape{4, 64, 64, 300}, Shape{3, 128, 128, 17},
                           Shape{5, 13, 7, 9}, Shape{2, 40, 72, 33}, Shape{8, 64, 64, 301}, Shape{7, 128, 128, 130},
                           Shape{6, 96, 80, 6}, Shape{16, 576, 512, 37}, Shape{2, 32, 16, 3}}) {
      const int64_t k_stride = sh.dim_k * 3 + 5, v_stride = sh.dim_v * 2 + 3;
      const auto q = random_vector(sh.n_q * sh.dim_k, 11, 0.3f);
      const auto k = random_vector(sh.n_pos * k_stride, 12), v = random_vector(sh.n_pos * v_stride, 13);
      std::vector<f16_t> k16(k.size()), v16(v.size());
      for (size_t i = 0; i < k.size(); ++i) k16[i] = f32_to_f16(k[i]);
      for (size_t i = 0; i < v.size(); ++i) v16[i] = f32_to_f16(v[i]);
      KvHead kv{k.data(), v.data(), k_stride, v_stride, sh.dim_k, sh.dim_v, f16};
      if (f16) kv.k = k16.data(), kv.v = v16.data();
      std::vector<float> scores(size_t(sh.n_q * sh.n_pos)), want(size_t(sh.n_q * sh.dim_v)), got(want.size());
      ref::attend(q.data(), sh.n_q, kv, sh.n_pos, 0.125f, scores.data(), want.data());
      auto check = [&](const char* isa) {
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1.f + std::fabs(want[i])))
              << isa << (f16 ? " f16" : " f32") << " n_q " << sh.n_q << " dim_k " << sh.dim_k << " dim_v "
              << sh.dim_v << " n_pos " << sh.n_pos << " [" << i << "]";
      };
      for (const SumOrder order : {SumOrder::Fastest, SumOrder::AsBlocks}) {
        const bool blocks = order == SumOrder::AsBlocks;
        std::fill(got.begin(), got.end(), -1.0f);
        avx2::attend(q.data(), sh.n_q, kv, sh.n_pos, 0.125f, scores.data(), got.data(), order);
        check(blocks ? "avx2 as blocks" : "avx2");
        if (!isa_available(Isa::Avx512)) continue;
        const auto avx2_got = got;
        std::fill(got.begin(), got.end(), -1.0f);
        const bool taken = avx512::attend(q.data(), sh.n_q, kv, sh.n_pos, 0.125f, scores.data(), got.data(), order);
        ASSERT_EQ(taken, sh.dim_k % 16 == 0 && sh.dim_v % 16 == 0) << sh.dim_k << " " << sh.dim_v;
        if (!taken) continue;
        check(blocks ? "avx512 as blocks" : "avx512");
        // In the blocks' order the two ISAs add alike.
        if (blocks) {
          ASSERT_EQ(0, std::memcmp(got.data(), avx2_got.data(), got.size() * sizeof(float)));
        }
      }
    }
  }
}

TEST(OpsAvx2Exp, SoftmaxOfExtremeSpreadKeepsTinyTerms) {
  if (!isa_available(Isa::Avx2)) GTEST_SKIP() << "CPU lacks AVX2/FMA";
  std::vector<float> x = {0.f, -20.f, -80.f, -86.f, -88.f, -200.f, 1e-3f, -1e-3f, -0.5f};
  auto want = x, got = x;
  ref::softmax(want.data(), int64_t(x.size()));
  avx2::softmax(got.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f * want[i] + 2e-38f) << i;
}

TEST(OpsDispatch, PublicEntryPointsAgreeWithReference) {
  const auto x = random_vector(37, 9), w = random_vector(37, 10);
  std::vector<float> want(37), got(37);
  ref::rms_norm(x.data(), w.data(), 37, 1e-6f, want.data());
  rms_norm(x.data(), w.data(), 37, 1e-6f, got.data());
  expect_close(want, got, 2e-6f, "rms_norm");
  auto s1 = x, s2 = x;
  ref::softmax(s1.data(), 37);
  softmax(s2.data(), 37);
  expect_close(s1, s2, 1e-6f, "softmax");
}

// ---- RoPE

TEST(Rope, NormalRotatesAdjacentPairs) {
  float x[4] = {1.f, 0.f, 1.f, 0.f};
  RopeParams p;
  p.head_dim = 4;
  p.n_rot = 4;
  rope(x, 1, p, 1);  // pair 0 turns by 1 rad, pair 1 by 10000^-0.5 = 0.01 rad
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[2], std::cos(0.01), 1e-6);
  EXPECT_NEAR(x[3], std::sin(0.01), 1e-6);
}

TEST(Rope, NeoxRotatesHalves) {
  float x[4] = {1.f, 1.f, 0.f, 0.f};
  RopeParams p;
  p.head_dim = 4;
  p.n_rot = 4;
  p.style = RopeStyle::NeoxHalves;
  rope(x, 1, p, 1);  // pairs (0,2) by 1 rad and (1,3) by 0.01 rad
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[2], std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::cos(0.01), 1e-6);
  EXPECT_NEAR(x[3], std::sin(0.01), 1e-6);
}

TEST(Rope, PartialRotationFactorsAndScale) {
  // Two heads of 6, first 4 dims rotated; pair 0 has factor 2, scale 0.5:
  // pair 0 turns by 0.5·3/2 = 0.75 rad, pair 1 by 0.5·3·100^-1... base 100,
  // n_rot 4: pair 1 frequency 100^-0.5 = 0.1 → 0.5·3·0.1 = 0.15 rad.
  std::vector<float> x = {1, 0, 1, 0, 7, 8, 1, 0, 1, 0, 9, 10};
  const float factors[2] = {2.f, 1.f};
  RopeParams p;
  p.head_dim = 6;
  p.n_rot = 4;
  p.freq_base = 100.f;
  p.freq_scale = 0.5f;
  p.freq_factors = factors;
  rope(x.data(), 2, p, 3);
  for (int h = 0; h < 2; ++h) {
    const float* v = x.data() + 6 * h;
    EXPECT_NEAR(v[0], std::cos(0.75), 1e-6);
    EXPECT_NEAR(v[1], std::sin(0.75), 1e-6);
    EXPECT_NEAR(v[2], std::cos(0.15), 1e-6);
    EXPECT_NEAR(v[3], std::sin(0.15), 1e-6);
  }
  EXPECT_EQ(x[4], 7.f);
  EXPECT_EQ(x[5], 8.f);
  EXPECT_EQ(x[10], 9.f);
  EXPECT_EQ(x[11], 10.f);
}

// YaRN, with DeepSeek-V3's settings on 8 rotated dims: the correction range
// is pairs [1, 3], so pairs 0-1 keep their original angle, pair 2 is half
// way, pair 3 is scaled by freq_scale; cos and sin carry the magnitude.
TEST(Rope, YarnMixesOriginalAndScaledAngles) {
  float low = 0, high = 0;
  yarn_correction_range(8, 4096, 10000.f, 32.f, 1.f, &low, &high);
  EXPECT_EQ(low, 1.f);
  EXPECT_EQ(high, 3.f);
  RopeParams p;
  p.head_dim = 8;
  p.n_rot = 8;
  p.freq_base = 10000.f;
  p.freq_scale = 1.f / 40;
  p.yarn = true;
  p.yarn_corr_low = low;
  p.yarn_corr_high = high;
  p.magnitude = 2.f;
  std::vector<float> x = {1, 0, 1, 0, 1, 0, 1, 0};
  const int64_t pos = 7;
  rope(x.data(), 1, p, pos);
  const double ramp[4] = {1, 1, 0.5, 0};
  for (int i = 0; i < 4; ++i) {
    const double theta = pos * std::pow(10000.0, -2.0 * i / 8);
    const double angle = ramp[i] * theta + (1 - ramp[i]) * theta / 40;
    EXPECT_NEAR(x[size_t(2 * i)], 2 * std::cos(angle), 1e-5) << "pair " << i;
    EXPECT_NEAR(x[size_t(2 * i + 1)], 2 * std::sin(angle), 1e-5) << "pair " << i;
  }
}

// Attention scores depend only on the distance between positions, and
// rotations keep lengths: the properties RoPE exists for.
TEST(Rope, ScoresDependOnRelativePosition) {
  for (RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::NeoxHalves}) {
    RopeParams p;
    p.head_dim = 64;
    p.n_rot = 64;
    p.style = style;
    const auto q = random_vector(64, 11), k = random_vector(64, 12);
    auto score = [&](int64_t qpos, int64_t kpos) {
      auto qr = q, kr = k;
      rope(qr.data(), 1, p, qpos);
      rope(kr.data(), 1, p, kpos);
      return ref::dot(qr.data(), kr.data(), 64);
    };
    EXPECT_NEAR(score(5, 3), score(12, 10), 1e-3);
    EXPECT_NEAR(score(40, 0), score(47, 7), 1e-3);
    EXPECT_GT(std::fabs(score(5, 3) - score(9, 3)), 1e-2);  // it does depend on distance
    auto r = q;
    rope(r.data(), 1, p, 1234);
    EXPECT_NEAR(ref::dot(r.data(), r.data(), 64), ref::dot(q.data(), q.data(), 64), 1e-3);
  }
}

TEST(Rope, PositionZeroIsIdentityAndBadDimsThrow) {
  auto x = random_vector(8, 13);
  const auto before = x;
  RopeParams p;
  p.head_dim = 8;
  p.n_rot = 8;
  rope(x.data(), 1, p, 0);
  EXPECT_EQ(x, before);
  p.n_rot = 7;
  EXPECT_THROW(rope(x.data(), 1, p, 1), Error);
  p.n_rot = 10;
  EXPECT_THROW(rope(x.data(), 1, p, 1), Error);
  // The angles need no head: only an odd or negative count is wrong for them.
  std::vector<float> cos_sin(10);
  EXPECT_NO_THROW(rope_angles(p, 1, cos_sin.data()));
  EXPECT_THROW(rope_rotate(x.data(), 1, p, cos_sin.data()), Error);
  p.n_rot = -2;
  EXPECT_THROW(rope_angles(p, 1, cos_sin.data()), Error);
}

}  // namespace
}  // namespace shardlm::ops
