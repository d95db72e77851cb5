// Every collective x dtype x world size 1-4 x awkward sizes, over TCP on
// loopback. Values are small integers so that any summation order gives the
// exact answer; determinism is tested separately with order-sensitive data.
#include <gtest/gtest.h>

#include <vector>

#include <fmt/format.h>

#include "comm/reduce.h"
#include "rank_harness.h"

namespace shardlm::comm {
namespace {

using testing::require;

float value(int rank, size_t i) { return float(int((i * 7 + size_t(rank) * 3) % 17) - 8); }

std::vector<uint8_t> make(DType dt, size_t count, int rank) {
  std::vector<uint8_t> out(count * reduce_elem_bytes(dt) + 1);
  for (size_t i = 0; i < count; ++i) store_elem(out.data(), dt, i, value(rank, i));
  return out;
}

float read_at(const std::vector<uint8_t>& buf, DType dt, size_t i) { return load_elem(buf.data(), dt, i); }

float expected(ReduceOp op, int n, size_t i) {
  float acc = value(0, i);
  for (int r = 1; r < n; ++r) acc = op == ReduceOp::Sum ? acc + value(r, i) : std::max(acc, value(r, i));
  return acc;
}

const DType kDTypes[] = {DType::F32, DType::F16, DType::BF16};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max};

void check_all_reduce(Communicator& c, size_t count) {
  for (DType dt : kDTypes)
    for (ReduceOp op : kOps) {
      auto buf = make(dt, count, c.rank());
      c.all_reduce(buf.data(), count, dt, op);
      for (size_t i = 0; i < count; ++i)
        RANK_REQUIRE(read_at(buf, dt, i) == expected(op, c.size(), i), "all_reduce {} {} count {} [{}]: got {} want {}", dtype_name(dt),
                            reduce_op_name(op), count, i, read_at(buf, dt, i),
                            expected(op, c.size(), i));
    }
}

void check_reduce_scatter(Communicator& c, size_t per_rank) {
  const int n = c.size();
  for (DType dt : kDTypes)
    for (ReduceOp op : kOps) {
      auto in = make(dt, per_rank * size_t(n), c.rank());
      std::vector<uint8_t> out(per_rank * reduce_elem_bytes(dt) + 1);
      c.reduce_scatter(in.data(), out.data(), per_rank, dt, op);
      for (size_t i = 0; i < per_rank; ++i) {
        size_t gi = size_t(c.rank()) * per_rank + i;
        RANK_REQUIRE(read_at(out, dt, i) == expected(op, n, gi), "reduce_scatter {} {} per_rank {} [{}]", dtype_name(dt),
                            reduce_op_name(op), per_rank, i);
      }
    }
}

void check_all_gather(Communicator& c, size_t bytes) {
  const int n = c.size();
  std::vector<uint8_t> mine(bytes + 1), all(bytes * size_t(n) + 1, 0xEE);
  for (size_t i = 0; i < bytes; ++i) mine[i] = uint8_t(c.rank() * 31 + i * 13);
  c.all_gather(mine.data(), all.data(), bytes);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < bytes; ++i)
      RANK_REQUIRE(all[size_t(r) * bytes + i] == uint8_t(r * 31 + i * 13), "all_gather bytes {} block {} [{}]", bytes, r, i);
}

void check_broadcast(Communicator& c, size_t bytes, int root) {
  std::vector<uint8_t> buf(bytes + 1, 0);
  if (c.rank() == root)
    for (size_t i = 0; i < bytes; ++i) buf[i] = uint8_t(root + i * 5);
  c.broadcast(buf.data(), bytes, root);
  for (size_t i = 0; i < bytes; ++i)
    RANK_REQUIRE(buf[i] == uint8_t(root + i * 5), "broadcast {} root {} [{}]", bytes, root, i);
}

const size_t kCounts[] = {0, 1, 7, 1003};

std::string everything(Communicator& c) {
  for (size_t n : kCounts) check_all_reduce(c, n);
  check_all_reduce(c, 100003);  // above the ring threshold in auto mode
  for (size_t n : kCounts) check_reduce_scatter(c, n);
  check_reduce_scatter(c, 30011);  // ring reduce-scatter
  for (size_t n : kCounts) check_all_gather(c, n);
  check_all_gather(c, 300007);
  for (size_t n : {size_t(0), size_t(1), size_t(1003), size_t(600001)}) {
    check_broadcast(c, n, 0);
    check_broadcast(c, n, c.size() - 1);
  }
  c.barrier();
  c.barrier();
  return "ok";
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, EveryOpDtypeAndSizeIsExact) {
  auto out = testing::run_ranks(GetParam(), everything);
  for (auto& o : out) EXPECT_TRUE(o.ok()) << testing::describe(out);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest, ::testing::Values(1, 2, 3, 4));

class AlgorithmTest : public ::testing::TestWithParam<std::tuple<int, AllReduceAlgo>> {};

TEST_P(AlgorithmTest, ForcedAlgorithmIsExactAtAllSizes) {
  auto [n, algo] = GetParam();
  testing::RunOptions o;
  o.config.algo = algo;
  o.config.ring_chunk_bytes = 4096;  // many pieces per ring step
  auto out = testing::run_ranks(n, [&](Communicator& c) {
    require(c.choose_all_reduce(1) == algo, "config not applied");
    for (size_t count : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(7), size_t(1003),
                         size_t(20001)})
      check_all_reduce(c, count);
    return std::string("ok");
  }, o);
  for (auto& o2 : out) EXPECT_TRUE(o2.ok()) << testing::describe(out);
}

INSTANTIATE_TEST_SUITE_P(
    SizesAndAlgos, AlgorithmTest,
    ::testing::Combine(::testing::Values(2, 3, 4),
                       ::testing::Values(AllReduceAlgo::OneShot, AllReduceAlgo::RecursiveDoubling,
                                         AllReduceAlgo::Ring, AllReduceAlgo::Chain,
                                         AllReduceAlgo::HalvingDoubling)));

// 64 MiB both ways auto may go: chain for two ranks over loopback TCP, ring
// for three.
class LargeAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(LargeAllReduceTest, SixtyFourMebibytesAreExact) {
  const int n = GetParam();
  const size_t count = size_t(16) << 20;  // 64 MiB of f32
  auto out = testing::run_ranks(n, [&](Communicator& c) {
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = value(c.rank(), i);
    const AllReduceAlgo want = n == 2 ? AllReduceAlgo::Chain : AllReduceAlgo::Ring;
    require(c.choose_all_reduce(count * 4) == want,
            fmt::format("64 MiB over {} loopback ranks should use the {}", n, algo_name(want)));
    c.all_reduce(buf.data(), count, DType::F32);
    for (size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += value(r, i);
      RANK_REQUIRE(buf[i] == sum, "64 MiB all_reduce [{}]", i);
    }
    return std::string("ok");
  });
  for (auto& o : out) EXPECT_TRUE(o.ok()) << testing::describe(out);
}

INSTANTIATE_TEST_SUITE_P(ChainAndRing, LargeAllReduceTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace shardlm::comm
