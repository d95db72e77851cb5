// Hand-built blocks with values worked out from the GGUF block layouts, and
// hand-worked encodings of simple inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/quant.h"
#include "core/quant_blocks.h"

namespace shardlm {
namespace {

// f16 constants used below.
constexpr f16_t kOne = 0x3c00, kHalf = 0x3800, kQuarter = 0x3400, kMinusTwo = 0xc000, kSixteenth = 0x2c00;

template <typename Block>
std::vector<float> decode(DType type, const Block& b) {
  std::vector<float> y(size_t(traits(type).block_elems));
  dequantize_row(type, &b, y.data(), int64_t(y.size()));
  return y;
}

TEST(QuantBlocks, Q4_0) {
  block_q4_0 b{};
  b.d = kHalf;
  b.qs[0] = 0x1F;  // element 0: 15-8 = 7; element 16: 1-8 = -7
  b.qs[5] = 0x80;  // element 5: 0-8; element 21: 8-8
  const auto y = decode(DType::Q4_0, b);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], -3.5f);
  EXPECT_EQ(y[5], -4.0f);
  EXPECT_EQ(y[21], 0.0f);
  EXPECT_EQ(y[1], -4.0f);  // zero nibble is -8
}

TEST(QuantBlocks, Q4_1) {
  block_q4_1 b{};
  b.d = kOne;
  b.m = kMinusTwo;
  b.qs[3] = 0xA5;
  const auto y = decode(DType::Q4_1, b);
  EXPECT_EQ(y[3], 3.0f);   // 5·1 - 2
  EXPECT_EQ(y[19], 8.0f);  // 10·1 - 2
  EXPECT_EQ(y[0], -2.0f);
}

TEST(QuantBlocks, Q5_0) {
  block_q5_0 b{};
  b.d = kQuarter;
  b.qs[2] = 0x3C;   // element 2 low nibble 12, element 18 low nibble 3
  b.qh[0] = 0x04;   // bit 2: element 2 gets +16
  b.qh[3] = 0x80;   // bit 31: element 31 gets +16
  b.qs[15] = 0x70;  // element 15: 0, element 31: 7
  const auto y = decode(DType::Q5_0, b);
  EXPECT_EQ(y[2], 3.0f);     // (28-16)/4
  EXPECT_EQ(y[18], -3.25f);  // (3-16)/4
  EXPECT_EQ(y[15], -4.0f);   // (0-16)/4
  EXPECT_EQ(y[31], 1.75f);   // (23-16)/4
}

TEST(QuantBlocks, Q5_1) {
  block_q5_1 b{};
  b.d = kHalf;
  b.m = kOne;
  b.qs[0] = 0xFF;
  b.qh[0] = 0x01;  // element 0
  b.qh[2] = 0x01;  // bit 16: element 16
  const auto y = decode(DType::Q5_1, b);
  EXPECT_EQ(y[0], 16.5f);  // 31·0.5 + 1
  EXPECT_EQ(y[16], 16.5f);
  EXPECT_EQ(y[1], 1.0f);
}

TEST(QuantBlocks, Q8_0) {
  block_q8_0 b{};
  b.d = kSixteenth;
  b.qs[0] = 100;
  b.qs[7] = -128;
  const auto y = decode(DType::Q8_0, b);
  EXPECT_EQ(y[0], 6.25f);
  EXPECT_EQ(y[7], -8.0f);
}

TEST(QuantBlocks, Q2_K) {
  block_q2_K b{};
  b.d = kOne;
  b.dmin = kHalf;
  b.qs[0] = 0xE4;      // elements 0, 32, 64, 96 get codes 0, 1, 2, 3
  b.scales[0] = 0x23;  // elements 0-15: scale 3, min 2
  b.scales[2] = 0x10;  // elements 32-47: scale 0, min 1
  b.scales[4] = 0x05;  // elements 64-79: scale 5, min 0
  b.scales[6] = 0x31;  // elements 96-111: scale 1, min 3
  b.qs[37] = 0x02;     // element 128+5 code 2
  b.scales[8] = 0x02;  // elements 128-143: scale 2
  const auto y = decode(DType::Q2_K, b);
  EXPECT_EQ(y[0], -1.0f);   // 3·0 - 0.5·2
  EXPECT_EQ(y[32], -0.5f);  // 0·1 - 0.5·1
  EXPECT_EQ(y[64], 10.0f);  // 5·2
  EXPECT_EQ(y[96], 1.5f);   // 1·3 - 0.5·3
  EXPECT_EQ(y[133], 4.0f);  // 2·2
}

TEST(QuantBlocks, Q3_K) {
  block_q3_K b{};
  b.d = kOne;
  // Scale 0 = 35-32 = 3: low nibble 3 in byte 0, top bits 2 in byte 8 bits 0-1.
  b.scales[0] = 0x03;
  b.scales[8] = 0x02;
  // Scale 9 = 53-32 = 21: low nibble in byte 1's high half, top bits in byte 9 bits 4-5.
  b.scales[1] = 0x50;
  b.scales[9] = 0x30;
  b.qs[0] = 0x01;     // element 0 low bits 1
  b.hmask[0] = 0x01;  // element 0 high bit set: no -4
  b.qs[48] = 0x02;    // element 144 = 128 + 16: qs[32+16] bits 0-1
  b.hmask[16] = 0x10; // element 144: hmask[144 % 32] bit 144/32
  b.qs[63] = 0xC0;    // element 255 = 128+96+31: qs[32+31] bits 6-7 = 3
  b.hmask[31] = 0x80; // element 255: bit 7
  const auto y = decode(DType::Q3_K, b);
  EXPECT_EQ(y[0], 3.0f);     // 3·1
  EXPECT_EQ(y[1], -12.0f);   // 3·(0-4)
  EXPECT_EQ(y[144], 42.0f);  // 21·2
  EXPECT_EQ(y[255], -96.0f); // scale 15 is 0-32; code 3
  EXPECT_EQ(y[16], 128.0f);  // scale 1 is -32, code 0-4
}

// Q4_K/Q5_K share this scale block: sub-block 0 (scale 10, min 4) and
// sub-block 5 (scale 37 = 0b100101, min 50 = 0b110010).
void fill_k4_scales(uint8_t s[12]) {
  s[0] = 10;
  s[4] = 4;
  s[9] = 0x25;  // scale 5 low nibble 5, min 5 low nibble 2
  s[1] = 0x80;  // scale 5 top bits 2 (scale 1 itself 0)
  s[5] = 0xC0;  // min 5 top bits 3 (min 1 itself 0)
}

TEST(QuantBlocks, ScaleMinK4) {
  uint8_t s[12] = {};
  fill_k4_scales(s);
  uint8_t sc, m;
  get_scale_min_k4(5, s, &sc, &m);
  EXPECT_EQ(sc, 37);
  EXPECT_EQ(m, 50);
  get_scale_min_k4(1, s, &sc, &m);
  EXPECT_EQ(sc, 0);
  EXPECT_EQ(m, 0);
}

TEST(QuantBlocks, Q4_K) {
  block_q4_K b{};
  b.d = kOne;
  b.dmin = kHalf;
  fill_k4_scales(b.scales);
  b.qs[0] = 0x97;   // element 0 code 7, element 32 code 9
  b.qs[65] = 0xF0;  // element 161 = 128+32+1: high nibble of qs[64+1]
  const auto y = decode(DType::Q4_K, b);
  EXPECT_EQ(y[0], 68.0f);    // 10·7 - 0.5·4
  EXPECT_EQ(y[32], 0.0f);    // scale 0, min 0
  EXPECT_EQ(y[161], 530.0f); // 37·15 - 0.5·50
  EXPECT_EQ(y[160], -25.0f);
}

TEST(QuantBlocks, Q5_K) {
  block_q5_K b{};
  b.d = kOne;
  b.dmin = kHalf;
  fill_k4_scales(b.scales);
  b.qs[0] = 0x07;
  b.qh[0] = 0x01;   // element 0 bit 4 (sub-block 0)
  b.qs[65] = 0xF0;
  b.qh[1] = 0x20;   // element 161 bit 4 (sub-block 5)
  const auto y = decode(DType::Q5_K, b);
  EXPECT_EQ(y[0], 228.0f);    // 10·23 - 2
  EXPECT_EQ(y[161], 1122.0f); // 37·31 - 25
}

TEST(QuantBlocks, Q6_K) {
  block_q6_K b{};
  b.d = kHalf;
  b.scales[0] = -3;
  b.scales[12] = 1;
  b.scales[15] = 2;
  b.ql[0] = 0x0F;
  b.qh[0] = 0x03;   // element 0: 15 | 3<<4 = 63
  b.ql[72] = 0x50;  // element 200 = 128+64+8: high nibble of ql[64+8]
  b.qh[40] = 0x20;  // element 200: qh[32+8] bits 4-5 = 2
  const auto y = decode(DType::Q6_K, b);
  EXPECT_EQ(y[0], -46.5f);  // 0.5·-3·(63-32)
  EXPECT_EQ(y[200], 2.5f);  // 0.5·1·(37-32)
  EXPECT_EQ(y[255], -32.f); // 0.5·2·(0-32)
}

TEST(QuantBlocks, Q8_K) {
  block_q8_K b{};
  b.d = 0.25f;
  b.qs[3] = -7;
  const auto y = decode(DType::Q8_K, b);
  EXPECT_EQ(y[3], -1.75f);
  EXPECT_EQ(y[4], 0.0f);
}

TEST(QuantBlocks, F16AndBF16Rows) {
  const f16_t h[2] = {kMinusTwo, kQuarter};
  const bf16_t bf[2] = {0x3f80, 0xc040};
  float y[2];
  dequantize_row(DType::F16, h, y, 2);
  EXPECT_EQ(y[0], -2.0f);
  EXPECT_EQ(y[1], 0.25f);
  dequantize_row(DType::BF16, bf, y, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
}

// x_j = j - 16: worked through the reference rounding by hand.
TEST(QuantEncode, Q8_0Ramp) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j - 16);
  block_q8_0 b;
  quantize_row_q8_0(x, &b, 32);
  EXPECT_EQ(b.d, f32_to_f16(16.f / 127.f));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[17], 8);  // 127/16 = 7.94
  EXPECT_EQ(b.qs[31], 119);  // 15·127/16 = 119.06
}

TEST(QuantEncode, Q4_0Ramp) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j - 16);
  block_q4_0 b;
  quantize_row(DType::Q4_0, x, &b, 32);
  EXPECT_EQ(b.d, 0x4000);     // signed max -16 / -8 = 2
  EXPECT_EQ(b.qs[0], 0x80);   // x0 = -16 → 0; x16 = 0 → 8
  EXPECT_EQ(b.qs[1], 0x91);   // x1 = -15: -7.5+8.5 → 1; x17 = 1: 0.5+8.5 → 9
  EXPECT_EQ(b.qs[15], 0xF8);  // x15 = -1 → 8; x31 = 15 → 16, clamped 15
}

TEST(QuantEncode, Q4_1Ramp) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j) * 0.5f + 1.0f;  // 1 .. 16.5
  block_q4_1 b;
  quantize_row(DType::Q4_1, x, &b, 32);
  EXPECT_EQ(b.d, f32_to_f16(15.5f / 15.f));
  EXPECT_EQ(b.m, kOne);
  EXPECT_EQ(b.qs[0] & 0x0F, 0);
  EXPECT_EQ(b.qs[15] >> 4, 15);
}

TEST(QuantEncode, Q6_KSingleSpike) {
  // One non-zero element: its sub-block's scale is the super-block maximum,
  // so it is encoded as code -32 · scale -128 · d with d = x / 4096.
  std::vector<float> x(QK_K, 0.f);
  x[37] = 3.0f;
  block_q6_K b;
  quantize_row(DType::Q6_K, x.data(), &b, QK_K);
  EXPECT_EQ(b.scales[2], -128);
  for (int j = 0; j < 16; ++j)
    if (j != 2) {
      EXPECT_EQ(b.scales[j], 0) << j;
    }
  std::vector<float> y(QK_K);
  dequantize_row(DType::Q6_K, &b, y.data(), QK_K);
  EXPECT_NEAR(y[37], 3.0f, 3.0f / 1024);
  for (int j = 0; j < QK_K; ++j)
    if (j != 37) {
      EXPECT_EQ(y[size_t(j)], 0.f) << j;
    }
}

}  // namespace
}  // namespace shardlm
