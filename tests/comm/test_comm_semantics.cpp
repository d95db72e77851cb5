// Determinism across ranks, point-to-point tag matching, async overlap and
// split() sub-groups.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "comm/reduce.h"
#include "rank_harness.h"

namespace shardlm::comm {
namespace {

class DeterminismTest : public ::testing::TestWithParam<std::tuple<int, AllReduceAlgo>> {};

TEST_P(DeterminismTest, AllRanksGetIdenticalBitsInTheDocumentedOrder) {
  auto [n, algo] = GetParam();
  const size_t count = 5003;  // not divisible by 2, 3 or 4
  // Rank r's input: every summation order gives other bits.
  const auto wild = [count](int r) { return testing::wild_values(uint32_t(1234 + r), count); };
  testing::RunOptions o;
  o.config.algo = algo;
  o.config.ring_chunk_bytes = 1024;
  auto out = testing::run_ranks(n, [&, n = n, algo = algo](Communicator& c) {
    std::vector<float> buf = wild(c.rank());
    c.all_reduce(buf.data(), count, DType::F32);
    // f16 too: rounding order must not differ between ranks either.
    std::vector<uint16_t> half(count);
    std::vector<float> src = wild(c.rank());
    for (size_t i = 0; i < count; ++i) half[i] = f32_to_f16(src[i] * 1e-3f);
    c.all_reduce(half.data(), count, DType::F16);
    if (algo == AllReduceAlgo::OneShot) {  // defined as rank order 0..n-1
      std::vector<std::vector<float>> in;
      for (int r = 0; r < n; ++r) in.push_back(wild(r));
      for (size_t i = 0; i < count; ++i) {
        float acc = in[0][i];
        for (int r = 1; r < n; ++r) acc += in[size_t(r)][i];
        RANK_REQUIRE(std::memcmp(&acc, &buf[i], 4) == 0, "oneshot [{}] not in rank order", i);
      }
    }
    if (algo == AllReduceAlgo::Ring) {  // segment j: ranks j+1, j+2, ..., j
      std::vector<std::vector<float>> in;
      for (int r = 0; r < n; ++r) in.push_back(wild(r));
      size_t base = count / size_t(n), rem = count % size_t(n);
      for (int j = 0; j < n; ++j) {
        size_t b = base * size_t(j) + std::min(size_t(j), rem), e = b + base + (size_t(j) < rem);
        for (size_t i = b; i < e; ++i) {
          float acc = in[size_t((j + 1) % n)][i];
          for (int k = 2; k <= n; ++k) acc += in[size_t((j + k) % n)][i];
          RANK_REQUIRE(std::memcmp(&acc, &buf[i], 4) == 0, "ring [{}] not in ring order", i);
        }
      }
    }
    if (algo == AllReduceAlgo::Chain) {  // rank k adds its own to what k+1 passed down
      std::vector<std::vector<float>> in;
      for (int r = 0; r < n; ++r) in.push_back(wild(r));
      for (size_t i = 0; i < count; ++i) {
        float acc = in[size_t(n - 1)][i];
        for (int r = n - 2; r >= 0; --r) acc = in[size_t(r)][i] + acc;
        RANK_REQUIRE(std::memcmp(&acc, &buf[i], 4) == 0, "chain [{}] not in chain order", i);
      }
    }
    if (algo == AllReduceAlgo::HalvingDoubling) {  // pairs at distance p/2 first, down to 1
      const int p = int(std::bit_floor(unsigned(n)));
      std::vector<std::vector<float>> partial;
      for (int r = 0; r < p; ++r) partial.push_back(wild(r));
      for (int r = p; r < n; ++r) {  // folded in second
        const std::vector<float> folded = wild(r);
        for (size_t i = 0; i < count; ++i) partial[size_t(r - p)][i] += folded[i];
      }
      for (int d = p / 2; d >= 1; d /= 2)
        for (int r = 0; r < d; ++r)
          for (size_t i = 0; i < count; ++i) partial[size_t(r)][i] += partial[size_t(r + d)][i];
      for (size_t i = 0; i < count; ++i)
        RANK_REQUIRE(std::memcmp(&partial[0][i], &buf[i], 4) == 0, "halving [{}] not in pair order", i);
    }
    return testing::digest(buf.data(), count * 4) + testing::digest(half.data(), count * 2);
  }, o);
  for (auto& r : out) ASSERT_TRUE(r.ok()) << testing::describe(out);
  for (auto& r : out) EXPECT_EQ(r.output, out[0].output) << testing::describe(out);
}

INSTANTIATE_TEST_SUITE_P(
    Algos, DeterminismTest,
    ::testing::Combine(::testing::Values(2, 3, 4),
                       ::testing::Values(AllReduceAlgo::OneShot, AllReduceAlgo::RecursiveDoubling,
                                         AllReduceAlgo::Ring, AllReduceAlgo::Chain,
                                         AllReduceAlgo::HalvingDoubling)));

TEST(PointToPoint, TagsMatchOutOfOrderAndLengthsAreReported) {
  auto out = testing::run_ranks(3, [](Communicator& c) {
    if (c.rank() == 0) {
      std::vector<uint8_t> big(200000, 7);
      c.send(1, 5, "five", 4);
      c.send(1, 6, big.data(), big.size());
      c.send(2, 9, nullptr, 0);
    } else if (c.rank() == 1) {
      std::vector<uint8_t> big(300000, 0);
      size_t got = c.recv(0, 6, big.data(), big.size());  // tag 5 arrives first: buffered
      RANK_REQUIRE(got == 200000 && big[0] == 7 && big[199999] == 7, "tag 6: got {}", got);
      char five[16] = {};
      got = c.recv(0, 5, five, sizeof five);
      RANK_REQUIRE(got == 4 && std::string(five, 4) == "five", "tag 5: got {}", got);
    } else {
      char none;
      RANK_REQUIRE(c.recv(0, 9, &none, 1) == 0, "empty message");
    }
    c.barrier();
    return std::string("ok");
  });
  for (auto& r : out) EXPECT_TRUE(r.ok()) << testing::describe(out);
}

TEST(PointToPoint, MessageLongerThanBufferFailsNamingThePeer) {
  testing::RunOptions o;
  o.op_timeout = std::chrono::milliseconds(3000);
  auto out = testing::run_ranks(2, [](Communicator& c) {
    char buf[64] = {};
    if (c.rank() == 0) c.send(1, 1, buf, sizeof buf);
    else c.recv(0, 1, buf, 8);
    return std::string("no error");
  }, o);
  EXPECT_FALSE(out[1].ok());
  EXPECT_NE(out[1].output.find("rank 0"), std::string::npos) << out[1].output;
  EXPECT_NE(out[1].output.find("exceeds the receive buffer"), std::string::npos) << out[1].output;
}

TEST(Split, SubGroupsReuseLinksAndOrderByKey) {
  auto out = testing::run_ranks(4, [](Communicator& c) {
    // TP pairs {0,1} and {2,3}, ranked in reverse by key; rank 3 also sits out a second split.
    auto tp = c.split(c.rank() / 2, -c.rank());
    RANK_REQUIRE(tp && tp->size() == 2, "tp size");
    RANK_REQUIRE(tp->rank() == 1 - c.rank() % 2, "tp rank {} for world {}", tp->rank(), c.rank());
    float v = float(c.rank() + 1);
    tp->all_reduce(&v, 1, DType::F32);
    float want = c.rank() < 2 ? 3.f : 7.f;
    RANK_REQUIRE(v == want, "tp sum {} want {}", v, want);
    int32_t token = c.rank() * 10, got = -1;  // point-to-point inside the pair
    if (tp->rank() == 0) {
      tp->send(1, 3, &token, 4);
      tp->recv(1, 3, &got, 4);
    } else {
      tp->recv(0, 3, &got, 4);
      tp->send(0, 3, &token, 4);
    }
    int partner = c.rank() ^ 1;
    RANK_REQUIRE(got == partner * 10, "pair message {}", got);
    auto three = c.split(c.rank() == 3 ? -1 : 0, c.rank());
    RANK_REQUIRE((c.rank() == 3) == (three == nullptr), "negative color");
    if (three) {
      float w = 1.f;
      three->all_reduce(&w, 1, DType::F32);
      RANK_REQUIRE(w == 3.f && three->size() == 3, "group of three {}", w);
    }
    float total = 1.f;
    c.all_reduce(&total, 1, DType::F32);  // the world still works
    RANK_REQUIRE(total == 4.f, "world {}", total);
    return std::string("ok");
  });
  for (auto& r : out) EXPECT_TRUE(r.ok()) << testing::describe(out);
}

}  // namespace
}  // namespace shardlm::comm
