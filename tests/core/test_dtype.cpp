// fp16/bf16 conversions against the hardware (F16C) and hand-worked values.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "core/kv_type.h"

namespace shardlm {
namespace {

__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

bool have_f16c() { return __builtin_cpu_supports("avx2"); }  // F16C ships with every AVX2 part

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Fp16, EveryHalfDecodesLikeF16C) {
  if (!have_f16c()) GTEST_SKIP() << "CPU lacks F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = f16_to_f32(uint16_t(h));
    const float hw = hw_f16_to_f32(uint16_t(h));
    ASSERT_EQ(bits_of(ours), bits_of(hw)) << "half 0x" << std::hex << h;
  }
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    const uint16_t back = f32_to_f16(f16_to_f32(uint16_t(h)));
    if (nan)
      ASSERT_EQ(back | 0x200, h | 0x200) << std::hex << h;  // quieted, payload kept
    else
      ASSERT_EQ(back, h) << std::hex << h;
  }
}

TEST(Fp16, RandomFloatsEncodeLikeF16C) {
  if (!have_f16c()) GTEST_SKIP() << "CPU lacks F16C";
  std::mt19937 rng(7);
  // Uniform bit patterns cover NaNs, infinities and huge values; the narrow
  // exponent band hits the normal/subnormal/rounding boundaries of f16.
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_int_distribution<uint32_t> exponent(100, 145), mantissa(0, 0x7fffff), sign(0, 1);
  for (int i = 0; i < 400000; ++i) {
    const uint32_t u = (i % 2) ? any_bits(rng) : (sign(rng) << 31) | (exponent(rng) << 23) | mantissa(rng);
    const float f = float_of(u);
    ASSERT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << "f32 bits 0x" << std::hex << u;
  }
}

TEST(Fp16, TiesAndLimitsByHand) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.f), 0x7bff);                 // largest finite
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);               // still rounds down
  EXPECT_EQ(f32_to_f16(65520.f), 0x7c00);                 // tie rounds up to even = inf
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);      // tie, even stays
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);      // tie, odd rounds up
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);   // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);   // tie to even: zero
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_FLOAT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_FLOAT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0xfc00)) && f16_to_f32(0xfc00) < 0);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(float_of(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808001)), 0x3f81);  // above tie
  EXPECT_EQ(f32_to_bf16(float_of(0x3f807fff)), 0x3f80);  // below tie
  EXPECT_EQ(f32_to_bf16(float_of(0x7f7fffff)), 0x7f80);  // max float rounds to inf
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  const uint16_t nan = f32_to_bf16(float_of(0x7f800001));  // payload only in low bits
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan))) << std::hex << nan;
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
}

TEST(Bf16, RandomFloatsWithinHalfUlp) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 10.f);
  for (int i = 0; i < 100000; ++i) {
    const float f = normal(rng);
    const float back = bf16_to_f32(f32_to_bf16(f));
    const float ulp = std::ldexp(1.0f, std::ilogb(f) - 7);
    ASSERT_LE(std::fabs(back - f), ulp / 2) << f;
  }
}

TEST(DType, TraitsMatchBlockStructs) {
  EXPECT_EQ(traits(DType::Q4_0).block_bytes, sizeof(block_q4_0));
  EXPECT_EQ(traits(DType::Q6_K).block_bytes, sizeof(block_q6_K));
  EXPECT_EQ(traits(DType::Q8_K).block_bytes, sizeof(block_q8_K));
  EXPECT_EQ(row_bytes(DType::Q4_K, 512), 2 * sizeof(block_q4_K));
  EXPECT_EQ(dtype_from_name("q5_k"), DType::Q5_K);
  EXPECT_EQ(dtype_from_name("nope"), std::nullopt);
}

TEST(DType, KvTypesAreF32AndF16Only) {
  EXPECT_EQ(kv_type_from_name("f32"), DType::F32);
  EXPECT_EQ(kv_type_from_name("F16"), DType::F16);
  EXPECT_EQ(kv_type_from_name("q8_0"), std::nullopt);
  EXPECT_EQ(kv_type_from_name(""), std::nullopt);
}

}  // namespace
}  // namespace shardlm
