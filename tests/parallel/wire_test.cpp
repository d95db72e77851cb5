// Activations on the wire: the codecs of parallel/wire_format.h and the
// compressed all-reduce of parallel/wire_all_reduce.h (ranks forked on
// loopback TCP, tests/comm/rank_harness.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../comm/rank_harness.h"
#include "core/error.h"
#include "parallel/wire_all_reduce.h"
#include "parallel/wire_format.h"

namespace shardlm::parallel {
namespace {

using comm::testing::describe;
using comm::testing::run_ranks;

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

TEST(WireFormat, NamesAndErrors) {
  EXPECT_EQ(wire_type_from_name("f32"), DType::F32);
  EXPECT_EQ(wire_type_from_name("F16"), DType::F16);
  EXPECT_EQ(wire_type_from_name("bf16"), DType::BF16);
  EXPECT_EQ(wire_type_from_name("q8_0"), DType::Q8_0);
  EXPECT_EQ(wire_type_name(DType::Q8_0), "q8_0");
  for (const char* bad : {"q4_0", "int8", ""}) {
    try {
      wire_type_from_name(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--wire-type"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(wire_row_bytes(DType::F32, 70), 280u);
  EXPECT_EQ(wire_row_bytes(DType::BF16, 70), 140u);
  EXPECT_EQ(wire_row_bytes(DType::Q8_0, 64), 68u);
  EXPECT_EQ(wire_row_bytes(DType::Q8_0, 70), 102u);  // the last block padded
}

// Each codec's error bound, on rows whose length is not a multiple of 32, and
// a row's bytes do not depend on the rows encoded with it.
TEST(WireFormat, RoundTripWithinBounds) {
  const size_t rows = 3, n = 70;
  const auto x = random_values(rows * n, 1, 3.0f);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    std::vector<uint8_t> all(rows * wire_row_bytes(t, n)), one(wire_row_bytes(t, n));
    wire_encode(t, x.data(), rows, n, all.data());
    wire_encode(t, x.data() + n, 1, n, one.data());
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + one.size(), one.size())) << dtype_name(t);
    std::vector<float> y(rows * n);
    wire_decode(t, all.data(), rows, n, y.data());
    for (size_t r = 0; r < rows; ++r) {
      for (size_t i = 0; i < n; ++i) {
        const float v = x[r * n + i], got = y[r * n + i];
        float bound = 0;
        if (t == DType::F16) bound = std::fabs(v) * 0x1p-11f;
        if (t == DType::BF16) bound = std::fabs(v) * 0x1p-8f;
        if (t == DType::Q8_0) {
          float amax = 0;  // of the 32-value block holding i
          for (size_t k = i / 32 * 32; k < std::min(n, i / 32 * 32 + 32); ++k) amax = std::max(amax, std::fabs(x[r * n + k]));
          bound = amax / 127 * 0.5f * 1.01f + amax * 0x1p-11f;
        }
        ASSERT_LE(std::fabs(got - v), bound) << dtype_name(t) << " row " << r << " value " << i;
      }
    }
  }
}

// Three ranks, each its own contribution: every rank ends with the same
// bytes, the sum of the decoded contributions in rank order, close to the
// exact sum; each rank reports (ranks − 1) encoded contributions sent.
TEST(WireAllReduce, EveryRankGetsIdenticalBytes) {
  const size_t rows = 2, n = 200;
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0}) {
    auto outcomes = run_ranks(3, [&](comm::Communicator& comm) -> std::string {
      auto data = random_values(rows * n, 10 + uint32_t(comm.rank()));
      WireAllReduce ar(t);
      const double sent = ar.run(comm, data.data(), rows, n);
      if (sent != 2.0 * double(rows * wire_row_bytes(t, n))) return "wrong byte count";
      std::string bytes(data.size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), data.data(), bytes.size());
      std::string hex;
      for (unsigned char c : bytes) hex += fmt::format("{:02x}", c);
      return hex;
    });
    ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok() && outcomes[2].ok()) << describe(outcomes);
    EXPECT_EQ(outcomes[0].output, outcomes[1].output) << dtype_name(t);
    EXPECT_EQ(outcomes[0].output, outcomes[2].output) << dtype_name(t);
    // Against the exact sum, computed here.
    std::vector<float> exact(rows * n, 0.0f);
    for (uint32_t r = 0; r < 3; ++r) {
      const auto v = random_values(rows * n, 10 + r);
      for (size_t i = 0; i < v.size(); ++i) exact[i] += v[i];
    }
    const std::string& hex = outcomes[0].output;
    ASSERT_EQ(hex.size(), exact.size() * 8);
    const float tol = t == DType::Q8_0 ? 0.1f : t == DType::BF16 ? 0.05f : 0.005f;
    for (size_t i = 0; i < exact.size(); ++i) {
      uint32_t bits = 0;
      for (int b = 3; b >= 0; --b) bits = bits << 8 | uint32_t(std::stoul(hex.substr(i * 8 + size_t(b) * 2, 2), nullptr, 16));
      float got;
      std::memcpy(&got, &bits, 4);
      ASSERT_NEAR(got, exact[i], tol) << dtype_name(t) << " value " << i;
    }
  }
}

}  // namespace
}  // namespace shardlm::parallel
