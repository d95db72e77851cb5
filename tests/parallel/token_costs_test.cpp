// The planner's measured terms besides the kernel rates: per-token work
// (parallel/token_costs.h) and the per-sync cost of an all-reduce
// (parallel/sync_cost.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "../comm/rank_harness.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "parallel/planner.h"
#include "parallel/sync_cost.h"
#include "parallel/token_costs.h"
#include "error_of.h"
#include "test_paths.h"

namespace shardlm::parallel {
namespace {

using test::error_of;

std::unique_ptr<gguf::File> stories() {
  const std::string dir = shardlm::test_paths::models_dir();
  const std::string top = dir + "/stories260K.gguf";
  return gguf::File::open(std::filesystem::exists(top) ? top : dir + "/synthetic/stories260K.gguf");
}

NodeSpec node_with(double vector_ns, double kv_store_ns, double attention_ns) {
  NodeSpec n = default_node("rank");
  n.token_costs = {vector_ns, kv_store_ns, attention_ns};
  return n;
}

// One token's step time at tp 1 × pp 1 with `n_seq` sequences: the planner's
// pipelined figure is n_seq / step time.
double step_seconds(const gguf::File& f, const NodeSpec& n, int64_t n_seq, int64_t n_ctx) {
  const Plan p = uniform_plan(f, 1, 1, {}, n, n_seq, {}, false, n_ctx);
  return double(p.pipelined_seqs) / p.pipelined_tok_s;
}

TEST(TokenCosts, EveryTokenOfAStepAddsTheMeasuredLayerWork) {
  auto f = stories();
  const ModelConfig c = ModelConfig::from_gguf(*f);
  const double ns = 3;  // per value, much more than the matrices of this tiny model take
  const double per_token = double(c.n_layer) * ns * 1e-9 *
                           layer_vector_values(c.n_embd, c.n_head * c.head_dim_k, c.n_head_kv * c.head_dim_k, c.n_ff);
  for (int64_t seqs : {1, 4}) {
    const double without = step_seconds(*f, node_with(1e-9, 1, 1), seqs, 64);
    const double with = step_seconds(*f, node_with(ns, 1, 1), seqs, 64);
    EXPECT_NEAR(with - without, double(seqs) * per_token, 1e-6 * per_token) << seqs << " sequence(s)";
  }
  const Plan one = uniform_plan(*f, 1, 1, {}, node_with(ns, 1, 1), 1, {}, false, 64);
  EXPECT_GT(one.costs[0].compute_seconds, per_token);  // `plan` shows the term in the rank's ms/token
}

TEST(TokenCosts, EveryTokenStoresItsKeyAndValueRows) {
  auto f = stories();
  const ModelConfig c = ModelConfig::from_gguf(*f);
  const double ns = 2;  // per byte; the plan's cache is f32
  const double per_token = double(c.n_layer * c.n_head_kv * (c.head_dim_k + c.head_dim_v)) * 4 * ns * 1e-9;
  for (int64_t seqs : {1, 5}) {
    const double more = step_seconds(*f, node_with(1, 1 + ns, 1), seqs, 64) - step_seconds(*f, node_with(1, 1, 1), seqs, 64);
    EXPECT_NEAR(more, double(seqs) * per_token, 1e-6 * per_token) << seqs << " sequence(s)";
  }
}

TEST(TokenCosts, AttentionGrowsWithTheContext) {
  auto f = stories();
  const ModelConfig c = ModelConfig::from_gguf(*f);
  const double ns = 0.5;
  // n_ctx 1000 attends 500 positions on average, n_ctx 200 attends 100.
  const double more = double(c.n_layer * c.n_head) * 400 * double(c.head_dim_k + c.head_dim_v) * ns * 1e-9;
  const NodeSpec n = node_with(1, 1, ns);
  EXPECT_NEAR(step_seconds(*f, n, 1, 1000) - step_seconds(*f, n, 1, 200), more, 1e-6 * more);
  EXPECT_NEAR(step_seconds(*f, n, 3, 1000) - step_seconds(*f, n, 3, 200), 3 * more, 3e-6 * more);
  // Unmeasured: the cached rows' bytes at the node's bandwidth, still growing with the context.
  const NodeSpec unmeasured = default_node("rank");
  EXPECT_GT(step_seconds(*f, unmeasured, 1, 1000), step_seconds(*f, unmeasured, 1, 200));
}

TEST(TokenCosts, MeasuredFiguresArePositive) {
  const TokenCosts k = measure_token_costs();
  EXPECT_GT(k.vector_ns, 0);
  EXPECT_LT(k.vector_ns, 1000);
  EXPECT_GT(k.kv_store_ns, 0);
  EXPECT_LT(k.kv_store_ns, 1000);
  EXPECT_GT(k.attention_ns, 0);
  EXPECT_LT(k.attention_ns, 1000);
}

TEST(TokenCosts, JsonRoundTripAndErrors) {
  const TokenCosts k{0.25, 0.125, 0.04};
  const TokenCosts back = TokenCosts::from_json(k.to_json(), "t");
  EXPECT_EQ(back.vector_ns, 0.25);
  EXPECT_EQ(back.kv_store_ns, 0.125);
  EXPECT_EQ(back.attention_ns, 0.04);
  EXPECT_TRUE(TokenCosts::from_json(TokenCosts{}.to_json(), "t").empty());  // a worker that measured nothing
  auto error = [](const char* text) {
    return error_of([&] { TokenCosts::from_json(nlohmann::json::parse(text), "worker w1"); });
  };
  EXPECT_EQ(error("[1, 2]"), "worker w1: token_costs is not an object");
  EXPECT_EQ(error(R"({"vector_ns": 1, "kv_store_ns": 1})"), "worker w1: token_costs has no 'attention_ns'");
  EXPECT_EQ(error(R"({"vector_ns": "1", "kv_store_ns": 1, "attention_ns": 1})"),
            "worker w1: token_costs.vector_ns is not a number");
  EXPECT_EQ(error(R"({"vector_ns": 1, "kv_store_ns": -1, "attention_ns": 1})"),
            "worker w1: token_costs.kv_store_ns = -1 is out of range");
  EXPECT_EQ(error(R"({"vector_ns": 1, "kv_store_ns": 1, "attention_ns": 1, "x": 2})"),
            "worker w1: token_costs has an unknown key 'x'");
  const auto n = nodes_from_json_text(
      R"([{"name": "a", "token_costs": {"vector_ns": 0.5, "kv_store_ns": 0.25, "attention_ns": 0.1}}])", "n.json");
  EXPECT_EQ(n[0].token_costs.vector_ns, 0.5);
  EXPECT_EQ(n[0].token_costs.attention_ns, 0.1);
}

// Rank 1 computes 3 ms between all-reduces, rank 0 nothing: rank 0 waits
// out the difference in every all-reduce, which the figure (the ranks'
// mean, the same on both) must show; so must a compressed wire type.
TEST(SyncCost, AnAllReduceCostsTheWaitForTheSlowestRank) {
  for (DType wire : {DType::F32, DType::Q8_0}) {
    auto outcomes = comm::testing::run_ranks(2, [&](comm::Communicator& comm) -> std::string {
      const double s = measure_all_reduce_seconds(comm, wire, 2048, 8, [&](int) {
        if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      });
      return std::to_string(s);
    });
    ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok()) << outcomes[0].output << outcomes[1].output;
    EXPECT_EQ(outcomes[0].output, outcomes[1].output);
    EXPECT_GT(std::stod(outcomes[0].output), 1.4e-3) << dtype_name(wire);  // ≥ half of 3 ms: rank 0's wait, averaged
  }
}

}  // namespace
}  // namespace shardlm::parallel
