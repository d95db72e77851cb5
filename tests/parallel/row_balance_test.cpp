// Dense FFN rows computed for a tensor-parallel neighbour (parallel/row_balance.h):
// the boundaries' arithmetic, and forked ranks on loopback TCP giving the
// same bits whatever rows each computes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "../comm/rank_harness.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "parallel/distributed_session.h"
#include "parallel/row_balance.h"
#include "step_driver.h"
#include "test_paths.h"

namespace shardlm::parallel {
namespace {

using comm::testing::describe;
using comm::testing::run_ranks;

TEST(HeldRanges, ReachIntoEachNeighbourInWholeSteps) {
  const std::vector<Range> owned{{0, 4096}, {4096, 8192}};
  const auto held = held_ranges(owned, 0.25);
  EXPECT_EQ(held[0], (Range{0, 5120}));
  EXPECT_EQ(held[1], (Range{3072, 8192}));
  // A middle rank reaches both ways; steps are whole (0.25 · 320 = 80 → 64).
  const std::vector<Range> three{{0, 320}, {320, 640}, {640, 960}};
  const auto h3 = held_ranges(three, 0.25);
  EXPECT_EQ(h3[0], (Range{0, 384}));
  EXPECT_EQ(h3[1], (Range{256, 704}));
  EXPECT_EQ(h3[2], (Range{576, 960}));
  EXPECT_EQ(held_ranges(owned, 0)[0], owned[0]);
  // A boundary off a 16-row group, or a margin under a step: none.
  EXPECT_EQ(held_ranges(std::vector<Range>{{0, 1000}, {1000, 2000}}, 0.25)[0], (Range{0, 1000}));
  EXPECT_EQ(held_ranges(std::vector<Range>{{0, 128}, {128, 256}}, 0.25)[1], (Range{128, 256}));
}

BalanceWindow window(double seconds, double fixed, double row_bytes) {
  return {.compute_seconds = seconds, .forwards = 8, .fixed_bytes = fixed, .row_bytes = row_bytes};
}

TEST(RowBalancer, MovesRowsToTheFasterRankWithinTheMargin) {
  const std::vector<Range> owned{{0, 4096}, {4096, 8192}};
  RowBalancer b(owned, held_ranges(owned, 0.25), "FFN");
  EXPECT_EQ(b.computed(0), owned[0]);
  EXPECT_FALSE(b.shipping());
  // Rank 1 takes 20 % longer for the same bytes: rank 0 should compute more.
  const double fixed = 4096 * 100, row = 100;
  const double t0 = 8 * (fixed + 4096 * row) * 1e-9;
  const BalanceWindow w[] = {window(t0, fixed, row), window(1.2 * t0, fixed, row)};
  b.observe(w);
  EXPECT_TRUE(b.shipping());
  // Equal time: (F + g0 β) = 1.2 (F + (8192 − g0) β) → g0 = 4096 + 0.2·8192·... ≈ 4841.
  EXPECT_EQ(b.computed(0).end, 4864);
  EXPECT_EQ(b.computed(1), (Range{4864, 8192}));
  // Much slower: clamped to the margin.
  const BalanceWindow slow[] = {window(t0, fixed, row), window(10 * t0, fixed, row)};
  for (int i = 0; i < 8; ++i) b.observe(slow);
  EXPECT_EQ(b.computed(0).end, 5120);
  // Garbage from a peer changes nothing.
  const BalanceWindow bad[] = {window(t0, fixed, row), window(std::nan(""), fixed, row)};
  b.observe(bad);
  EXPECT_EQ(b.computed(0).end, 5120);
  b.shift_all(-4096);
  EXPECT_EQ(b.computed(0).end, 3072);
  b.shift_all(0);
  EXPECT_FALSE(b.shipping());
}

TEST(RowBalancer, KeepsTheBoundariesForNoiseUnderAStep) {
  const std::vector<Range> owned{{0, 4096}, {4096, 8192}};
  RowBalancer b(owned, held_ranges(owned, 0.25), "FFN");
  const double fixed = 4096 * 100, row = 100, t = 8 * (fixed + 4096 * row) * 1e-9;
  const BalanceWindow w[] = {window(t, fixed, row), window(1.01 * t, fixed, row)};
  for (int i = 0; i < 4; ++i) b.observe(w);
  EXPECT_FALSE(b.shipping());
  // Nor for two steps' worth (3 % slower: ~120 rows), which cost more than they save.
  const BalanceWindow small[] = {window(t, fixed, row), window(1.03 * t, fixed, row)};
  for (int i = 0; i < 4; ++i) b.observe(small);
  EXPECT_FALSE(b.shipping());
}

TEST(RowBalancer, RefusesRangesThatDoNotFit) {
  const std::vector<Range> owned{{0, 4096}, {4096, 8192}};
  EXPECT_THROW(RowBalancer(owned, {{0, 4096}, {4000, 8192}}, "FFN"), Error);  // not whole steps
  EXPECT_THROW(RowBalancer(owned, {{0, 4000}, {4096, 8192}}, "FFN"), Error);   // own rows not covered
  EXPECT_THROW(RowBalancer(owned, {{0, 4096}, {4096, 8256}}, "FFN"), Error);   // past the last rank
  EXPECT_THROW(RowBalancer({{0, 4096}, {4000, 8192}}, {{0, 4096}, {4000, 8192}}, "FFN"), Error);  // gap
  EXPECT_THROW(RowBalancer(owned, {{0, 4096}}, "FFN"), Error);
  try {
    RowBalancer(owned, {{0, 4000}, {4096, 8192}}, "output");
    ADD_FAILURE() << "uncovered rows accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 holds output rows [0, 4000) for its rows [0, 4096)"), std::string::npos)
        << e.what();
  }
}

std::string synth_model(const std::string& type) {
  const std::string path = ::testing::TempDir() + "shardlm_ffn_tiny_" + type + "_" + std::to_string(getpid()) + ".gguf";
  if (!std::filesystem::exists(path)) {
    const std::string cmd = std::string(test_paths::shardlm_binary()) + " synth --preset tiny --type " + type +
                            " -o " + path + " > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  return path;
}

// Rank 0's prompt logits (prompts of 1, 9 and 24 tokens: one token, a
// shipped batch, a batch too long to ship) and greedy tokens of three
// sequences decoded together, with the FFN boundaries moved by `shift`
// (none: by measured speed), as JSON; and the rows each rank computed for
// a neighbour.
nlohmann::json run_tp(const std::string& path, int tp, std::optional<int64_t> shift,
                      const std::vector<size_t>& lengths = {1, 9, 24}, int n_seq = 3) {
  auto outcomes = run_ranks(tp, [&](comm::Communicator& comm) -> std::string {
    auto file = gguf::File::open(path);
    const Plan plan = uniform_plan(*file, tp, 1, {}, default_node("127.0.0.1"));
    DistributedSessionOptions o;
    o.n_ctx = 64;
    o.n_seq = n_seq;
    o.n_batch = 32;
    o.balance_shift = shift;
    DistributedSession s(comm.shared_from_this(), plan, *file, o);
    nlohmann::json j;
    if (comm.rank() == 0) {
      const int64_t vocab = s.n_vocab();
      std::vector<std::vector<TokenId>> prompts;
      for (size_t len : lengths) {
        std::vector<TokenId> p;
        for (size_t i = 0; i < len; ++i) p.push_back(TokenId((i * 7919 + len) % size_t(vocab)));
        j["logits"].push_back(s.prompt_logits(p));
        prompts.push_back(p);
      }
      SamplerParams greedy;
      greedy.temperature = 0;
      if (prompts.size() > size_t(n_seq)) prompts.resize(size_t(n_seq));
      j["tokens"] = testing::generate_steps(s, prompts, greedy, 12);
      s.shutdown();
    } else {
      while (s.serve()) {
      }
    }
    j["rows_sent"] = s.stats().rows_sent;
    return j.dump();
  });
  for (const auto& o : outcomes)
    if (!o.ok()) ADD_FAILURE() << describe(outcomes);
  nlohmann::json all = nlohmann::json::array();
  for (const auto& o : outcomes) all.push_back(o.ok() ? nlohmann::json::parse(o.output) : nlohmann::json());
  return all;
}

void expect_same_bits(const nlohmann::json& a, const nlohmann::json& b, const std::string& what) {
  ASSERT_EQ(a[0]["logits"].size(), b[0]["logits"].size()) << what;
  for (size_t p = 0; p < a[0]["logits"].size(); ++p) {
    const auto x = a[0]["logits"][p].get<std::vector<float>>(), y = b[0]["logits"][p].get<std::vector<float>>();
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << what << ": prompt " << p;
  }
  EXPECT_EQ(a[0]["tokens"], b[0]["tokens"]) << what;
}

// Every weight type with its own kernels, every row a rank may compute for
// either neighbour: the same bits as with each rank computing its own rows.
TEST(RowBalance, RowsComputedByANeighbourGiveTheSameBits) {
  for (const std::string type : {"q4_0", "q8_0", "q5_1", "bf16"}) {
    const std::string path = synth_model(type);
    const auto own = run_tp(path, 2, 0);
    ASSERT_FALSE(own[0].is_null());
    EXPECT_EQ(own[0]["rows_sent"].get<double>() + own[1]["rows_sent"].get<double>(), 0) << type;
    for (const int64_t shift : {-128, -64, 64, 128}) {
      const auto moved = run_tp(path, 2, shift);
      ASSERT_FALSE(moved[0].is_null());
      // A positive shift has rank 0 compute rank 1's first rows.
      EXPECT_GT(moved[shift > 0 ? 0 : 1]["rows_sent"].get<double>(), 0) << type << " shift " << shift;
      expect_same_bits(own, moved, type + " shift " + std::to_string(shift));
    }
    expect_same_bits(own, run_tp(path, 2, std::nullopt), type + " measured");
    std::filesystem::remove(path);
  }
}

// A plan altered for one rank (plans come over the network) fails at once
// on every rank, naming the one that differs, instead of leaving a rank
// waiting for rows its neighbour never sends.
TEST(RowBalance, RanksWithOtherRowsFailAtOnce) {
  const std::string path = synth_model("q8_0");
  auto outcomes = run_ranks(2, [&](comm::Communicator& comm) -> std::string {
    auto file = gguf::File::open(path);
    Plan plan = uniform_plan(*file, 2, 1, {}, default_node("127.0.0.1"));
    if (comm.rank() == 1) plan.ranks[0].vocab_held.end -= kBalanceStepRows;
    DistributedSession s(comm.shared_from_this(), plan, *file, DistributedSessionOptions{});
    return "constructed";
  });
  for (const auto& o : outcomes) {
    EXPECT_FALSE(o.ok());
    EXPECT_NE(o.output.find("other FFN or output rows for this stage's ranks"), std::string::npos) << o.output;
  }
  std::filesystem::remove(path);
}

// A middle rank sends to, or receives from, both neighbours.
TEST(RowBalance, ThreeRanksGiveTheSameBits) {
  const std::string path = synth_model("q8_0");
  const auto own = run_tp(path, 3, 0);
  ASSERT_FALSE(own[0].is_null());
  for (const int64_t shift : {-64, 64}) {
    const auto moved = run_tp(path, 3, shift);
    ASSERT_FALSE(moved[0].is_null());
    EXPECT_GT(moved[1]["rows_sent"].get<double>(), 0) << shift;
    expect_same_bits(own, moved, "tp 3 shift " + std::to_string(shift));
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace shardlm::parallel
