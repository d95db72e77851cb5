// The tuning table (comm/tuning.h): parsing, bad files, lookup, and that the
// algorithm a table picks gives exact sums and the same bits on every rank.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "comm/tuning.h"
#include "core/error.h"
#include "rank_harness.h"

namespace shardlm::comm {
namespace {

const char* kGood =
    "# written by hand\n"
    "tcp 2 loopback 32767 oneshot 0\n"
    "tcp 2 loopback 262143 recdbl 0   # trailing comment\n"
    "\n"
    "tcp 2 loopback max chain 524288\n"
    "tcp 3 loopback max ring 131072\n"
    "mpi 2 other max native 0\n";

TEST(TuningTable, LookupTakesTheTightestCoveringRow) {
  TuningTable t = TuningTable::parse(kGood, "good");
  ASSERT_EQ(t.rows().size(), 5u);
  auto at = [&](std::string_view b, int n, bool lo, size_t bytes) {
    auto c = t.lookup(b, n, lo, bytes);
    return c ? std::string(algo_name(c->algo)) + "/" + std::to_string(c->chunk_bytes) : std::string("none");
  };
  EXPECT_EQ(at("tcp", 2, true, 4), "oneshot/0");
  EXPECT_EQ(at("tcp", 2, true, 32767), "oneshot/0");
  EXPECT_EQ(at("tcp", 2, true, 32768), "recdbl/0");
  EXPECT_EQ(at("tcp", 2, true, 262144), "chain/524288");
  EXPECT_EQ(at("tcp", 2, true, size_t(1) << 40), "chain/524288");
  EXPECT_EQ(at("tcp", 3, true, 100), "ring/131072");
  EXPECT_EQ(at("tcp", 2, false, 100), "none");  // other links: no row
  EXPECT_EQ(at("tcp", 4, true, 100), "none");
  EXPECT_EQ(at("mpi", 2, false, 1 << 20), "native/0");
  EXPECT_EQ(at("shm", 2, false, 1 << 20), "none");
}

// Without a table: the size rules of CommConfig (communicator.h).
TEST(TuningTable, DefaultsWithoutATable) {
  const CommConfig c;
  auto at = [&](int ranks, bool loopback, size_t bytes) {
    return std::string(algo_name(default_all_reduce(c, "tcp", ranks, loopback, bytes).algo));
  };
  EXPECT_EQ(at(4, false, 1024), "oneshot");
  EXPECT_EQ(at(4, false, 64 << 10), "recdbl");
  EXPECT_EQ(at(4, false, 1 << 20), "halving");
  EXPECT_EQ(at(8, true, 8 << 20), "halving");
  EXPECT_EQ(at(4, false, 64 << 20), "ring");
  EXPECT_EQ(at(3, false, 1 << 20), "ring");  // not a power of two
  EXPECT_EQ(at(6, false, 1 << 20), "ring");
  EXPECT_EQ(at(2, false, 1 << 20), "ring");
  EXPECT_EQ(at(2, true, 8 << 20), "chain");
  EXPECT_EQ(std::string(algo_name(default_all_reduce(c, "shm", 4, false, 1 << 20).algo)), "native");
}

TEST(TuningTable, TunerKeepsThePreviousChoiceAndNativeWithinTheMargin) {
  const AllReduceChoice native{AllReduceAlgo::Native, 0}, recdbl{AllReduceAlgo::RecursiveDoubling, 0},
      ring{AllReduceAlgo::Ring, 131072}, ring_small{AllReduceAlgo::Ring, 32768};
  const std::vector<AllReduceChoice> with_native{native, recdbl, ring, ring_small};
  const std::vector<AllReduceChoice> without{recdbl, ring, ring_small};
  // The fastest when nothing else is close.
  EXPECT_EQ(pick_tuned(without, {10, 20, 30}, {}), 0u);
  EXPECT_EQ(pick_tuned(without, {30, 20, 10}, recdbl), 2u);
  // The previous choice while within the margin, its piece size included.
  EXPECT_EQ(pick_tuned(without, {10.5, 10, 20}, recdbl), 0u);
  EXPECT_EQ(pick_tuned(without, {20, 10.5, 10}, ring), 1u);
  EXPECT_EQ(pick_tuned(without, {20, 12, 10}, ring), 2u);
  // Native within the margin of the fastest, even over the previous choice.
  EXPECT_EQ(pick_tuned(with_native, {10.9, 10, 20, 30}, recdbl), 0u);
  EXPECT_EQ(pick_tuned(with_native, {12, 10, 20, 30}, {}), 1u);
}

TEST(TuningTable, TextRoundTrips) {
  TuningTable t = TuningTable::parse(kGood, "good");
  TuningTable again = TuningTable::parse(t.to_text(), "again");
  EXPECT_EQ(again.to_text(), t.to_text());
}

TEST(TuningTable, BadRowsNameFileLineAndField) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"tcp 2 loopback max chain\n", "good:1: want 6 fields"},
      {"# ok\nudp 2 loopback max chain 0\n", "good:2: backend 'udp'"},
      {"tcp 1 loopback max chain 0\n", "ranks '1'"},
      {"tcp two loopback max chain 0\n", "ranks 'two'"},
      {"tcp 2 lan max chain 0\n", "links 'lan'"},
      {"tcp 2 loopback -5 chain 0\n", "up_to_bytes '-5'"},
      {"tcp 2 loopback 99999999999999999999 chain 0\n", "up_to_bytes"},
      {"tcp 2 loopback max fastest 0\n", "algo 'fastest'"},
      {"tcp 2 loopback max auto 0\n", "algo 'auto'"},
      {"tcp 2 loopback max ring 100\n", "chunk_bytes '100'"},
      {"tcp 2 loopback max ring 1x\n", "chunk_bytes '1x'"},
      {"tcp 2 loopback max ring 0\ntcp 2 loopback max chain 0\n", "good:2: repeats"},
      {"\x01\x02\xff garbage\n", "good:1:"},
  };
  for (const Case& c : cases) {
    try {
      TuningTable::parse(c.text, "good");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    }
  }
}

class TuningFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/shardlm-tuning-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/comm-tuning.txt";
    setenv("SHARDLM_COMM_TUNING", path_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("SHARDLM_COMM_TUNING");
    std::remove(path_.c_str());
    rmdir(dir_.c_str());
  }
  void write(const std::string& text) { std::ofstream(path_) << text; }
  std::string dir_, path_;
};

TEST_F(TuningFile, GoodFileIsLoaded) {
  write(kGood);
  auto t = TuningTable::load_default();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->rows().size(), 5u);
  EXPECT_EQ(CommConfig::from_env().tuning->rows().size(), 5u);
}

TEST_F(TuningFile, BadOrMissingFileIsIgnoredWithAWarning) {
  write("tcp 2 loopback max ring 7\n");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(TuningTable::load_default(), nullptr);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning: ignoring comm tuning file"), std::string::npos) << err;
  EXPECT_NE(err.find(path_ + ":1: chunk_bytes"), std::string::npos) << err;
  std::remove(path_.c_str());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(TuningTable::load_default(), nullptr);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot be read"), std::string::npos) << err;
}

// A table that sends each size class to another algorithm and piece size; the
// communicator must follow it, and each size (odd counts, counts around the
// piece and row boundaries) must give exact small-integer sums and the same
// bits of inexact sums on every rank.
class TunedWorld : public ::testing::TestWithParam<int> {};

TEST_P(TunedWorld, ChosenAlgorithmsAreExactAndIdenticalOnEveryRank) {
  const int n = GetParam();
  const std::string table = fmt::format(
      "tcp {0} loopback 1023 oneshot 0\n"
      "tcp {0} loopback 8191 recdbl 0\n"
      "tcp {0} loopback 65535 ring 4096\n"
      "tcp {0} loopback max chain 8192\n",
      n);
  testing::RunOptions o;
  o.config.tuning = std::make_shared<const TuningTable>(TuningTable::parse(table, "test"));
  auto out = testing::run_ranks(n, [&](Communicator& c) {
    RANK_REQUIRE(c.choose_all_reduce(1023) == AllReduceAlgo::OneShot, "row 1 not applied");
    RANK_REQUIRE(c.choose_all_reduce(8191) == AllReduceAlgo::RecursiveDoubling, "row 2 not applied");
    RANK_REQUIRE(c.choose_all_reduce(8192) == AllReduceAlgo::Ring, "row 3 not applied");
    RANK_REQUIRE(c.choose_all_reduce_choice(65535).chunk_bytes == 4096, "row 3 chunk not applied");
    RANK_REQUIRE(c.choose_all_reduce(65536) == AllReduceAlgo::Chain, "row 4 not applied");
    std::string digests;
    for (size_t count : {size_t(1), size_t(255), size_t(256), size_t(2047), size_t(2049), size_t(1024 * n - 1),
                         size_t(1024 * n + 1), size_t(16383), size_t(16385), size_t(30001)}) {
      std::vector<float> exact(count);
      for (size_t i = 0; i < count; ++i) exact[i] = float(int((i * 7 + size_t(c.rank()) * 3) % 17) - 8);
      c.all_reduce(exact.data(), count, DType::F32);
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += float(int((i * 7 + size_t(r) * 3) % 17) - 8);
        RANK_REQUIRE(exact[i] == want, "count {} [{}]: got {} want {}", count, i, exact[i], want);
      }
      std::vector<float> inexact = testing::wild_values(uint32_t(99 + c.rank()), count);
      c.all_reduce(inexact.data(), count, DType::F32);
      digests += testing::digest(inexact.data(), count * 4) + " ";
    }
    return digests;
  }, o);
  for (auto& r : out) ASSERT_TRUE(r.ok()) << testing::describe(out);
  for (auto& r : out) EXPECT_EQ(r.output, out[0].output) << "ranks disagree on the bits";
}

INSTANTIATE_TEST_SUITE_P(Ranks, TunedWorld, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace shardlm::comm
