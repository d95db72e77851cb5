// Every collective over the shm backend, through the Communicator API, for
// f32/f16/bf16, world sizes 1-4 and sizes 0, 1, odd and chunked; with the
// backend's fast paths and with the generic algorithms over the shm byte queues.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "comm/reduce.h"
#include "comm/test_shm_helpers.h"
#include "core/error.h"

namespace shardlm::comm {
namespace {

using testing::run_ranks;
using testing::shm_options;
using testing::shm_world;
using testing::unique_session;
using testing::decode;
using testing::encode16;

// One communicator per rank runs the whole matrix; a mismatch is reported
// with the op/dtype/size so a failure says exactly what broke.
void run_matrix(int world, bool fast_paths, AllReduceAlgo algo = AllReduceAlgo::Auto) {
  const std::string session = unique_session("matrix");
  const std::vector<size_t> counts = {0, 1, 1237, (size_t(300) << 10) + 3};
  run_ranks(world, [&](int rank) {
    CommConfig config;
    config.allow_fast_paths = fast_paths;
    config.algo = algo;
    auto comm = shm_world(shm_options(session, rank, world), config);
    ASSERT_EQ(comm->rank(), rank);
    ASSERT_EQ(comm->size(), world);
    testing::check_all_collectives(*comm, counts);
    comm->barrier();
  });
}

class ShmMatrix : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ShmMatrix, EveryOpDtypeAndSize) { run_matrix(std::get<0>(GetParam()), std::get<1>(GetParam())); }

INSTANTIATE_TEST_SUITE_P(Worlds, ShmMatrix,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_fastpath" : "_generic");
                         });

// Each generic all-reduce forced: the shm queues have no combining receive,
// so every algorithm's receive-then-reduce path runs.
class ShmForcedAlgo : public ::testing::TestWithParam<std::tuple<int, AllReduceAlgo>> {};

TEST_P(ShmForcedAlgo, EveryOpDtypeAndSize) {
  run_matrix(std::get<0>(GetParam()), false, std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShmForcedAlgo,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(AllReduceAlgo::RecursiveDoubling, AllReduceAlgo::Ring,
                                                              AllReduceAlgo::Chain, AllReduceAlgo::HalvingDoubling)));

// Random data: every rank gets the same bits, equal to the serial sum in
// rank order (f16/bf16 accumulated in f32, rounded once), in both the
// one-shot and the chunked path; a second run repeats them exactly.
// Two ranks sum every chunk on both ranks (one-shot), three split the sum
// above one_shot_bytes: both must give the rank-order sum, bit for bit.
void check_rank_order_sums(int world) {
  const std::string session = unique_session("determinism");
  std::vector<std::vector<std::vector<std::byte>>> results(world);
  run_ranks(world, [&](int rank) {
    auto comm = shm_world(shm_options(session, rank, world), CommConfig{});
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      for (size_t count : {size_t(1001), size_t(400'000)}) {
        for (int rep = 0; rep < 2; ++rep) {
          std::vector<std::vector<float>> inputs(world, std::vector<float>(count));
          for (int r = 0; r < world; ++r) {
            std::mt19937 gen(unsigned(1000 * r + count));
            std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
            for (auto& v : inputs[size_t(r)]) v = dist(gen);
          }
          const size_t eb = reduce_elem_bytes(t);
          std::vector<std::byte> buf(count * eb), want(count * eb);
          for (size_t i = 0; i < count; ++i) {
            float acc = 0;
            for (int r = 0; r < world; ++r) {
              float x = inputs[size_t(r)][i];
              if (t == DType::F16) x = f16_to_f32(f32_to_f16(x));
              if (t == DType::BF16) x = bf16_to_f32(f32_to_bf16(x));
              acc = r == 0 ? x : acc + x;
              if (r == rank) {
                if (t == DType::F32) std::memcpy(buf.data() + i * 4, &x, 4);
                else {
                  const uint16_t h = encode16(t, x);
                  std::memcpy(buf.data() + i * 2, &h, 2);
                }
              }
            }
            if (t == DType::F32) std::memcpy(want.data() + i * 4, &acc, 4);
            else {
              const uint16_t h = encode16(t, acc);
              std::memcpy(want.data() + i * 2, &h, 2);
            }
          }
          comm->all_reduce(buf.data(), count, t, ReduceOp::Sum);
          ASSERT_EQ(buf, want) << dtype_name(t) << " count " << count << " rep " << rep;
          results[size_t(rank)].push_back(buf);
        }
      }
    }
  });
  for (int r = 1; r < world; ++r) EXPECT_EQ(results[size_t(r)], results[0]);
}

TEST(ShmCollectives, DeterministicRankOrderSumsTwoRanks) { check_rank_order_sums(2); }
TEST(ShmCollectives, DeterministicRankOrderSumsThreeRanks) { check_rank_order_sums(3); }

// 64 MiB of f32 through the chunked path, 2 ranks.
TEST(ShmCollectives, AllReduce64MiB) {
  const size_t count = size_t(16) << 20;
  const std::string session = unique_session("big");
  run_ranks(2, [&](int rank) {
    auto comm = shm_world(shm_options(session, rank, 2), CommConfig{});
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = float(i % 1024) * float(rank + 1);
    comm->all_reduce(buf.data(), count, DType::F32, ReduceOp::Sum);
    for (size_t i = 0; i < count; i += 4093) ASSERT_EQ(buf[i], float(i % 1024) * 3.0f) << i;
    ASSERT_EQ(buf[count - 1], float((count - 1) % 1024) * 3.0f);
  });
}

}  // namespace
}  // namespace shardlm::comm
