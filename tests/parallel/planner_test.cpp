// The planner: splits, units from tensor types, explicit and automatic
// layouts, memory refusal, node descriptions.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"
#include "core/thread_pool.h"
#include "parallel/kernel_rates.h"
#include "parallel/planner.h"
#include "error_of.h"
#include "test_paths.h"

namespace shardlm::parallel {
namespace {

std::string model(const std::string& name) {
  const std::string top = std::string(shardlm::test_paths::models_dir()) + "/" + name;
  return std::filesystem::exists(top) ? top : std::string(shardlm::test_paths::models_dir()) + "/synthetic/" + name;
}

std::vector<NodeSpec> nodes(int n, double mem_gb = 16) {
  std::vector<NodeSpec> v;
  for (int i = 0; i < n; ++i) {
    NodeSpec s = default_node(fmt::format("10.0.0.{}:7000", i + 1));
    s.memory_bytes = int64_t(mem_gb * double(1ll << 30));
    v.push_back(s);
  }
  return v;
}

using test::error_of;

TEST(WeightedSplit, EvenUnevenAndWeighted) {
  EXPECT_EQ(weighted_split(8, 1, {1, 1}, "x"), (std::vector<Range>{{0, 4}, {4, 8}}));
  EXPECT_EQ(weighted_split(8, 1, {1, 1, 1}, "x"), (std::vector<Range>{{0, 3}, {3, 6}, {6, 8}}));
  EXPECT_EQ(weighted_split(3, 256, {1, 1}, "x"), (std::vector<Range>{{0, 512}, {512, 768}}));
  // A node twice as fast gets twice the rows.
  EXPECT_EQ(weighted_split(9, 1, {2, 1}, "x"), (std::vector<Range>{{0, 6}, {6, 9}}));
  // Everyone gets at least one unit, however slow.
  EXPECT_EQ(weighted_split(3, 1, {100, 1, 1}, "x"), (std::vector<Range>{{0, 1}, {1, 2}, {2, 3}}));
  EXPECT_NE(error_of([] { weighted_split(2, 1, {1, 1, 1}, "heads"); }).find("cannot split 2 heads into 3"),
            std::string::npos);
}

TEST(SplitUnits, FollowBlocksOfColumnSlicedTensors) {
  auto f32 = gguf::File::open(model("stories260K.gguf"));
  auto q8 = gguf::File::open(model("stories260K-Q8_0.gguf"));
  auto q4k = gguf::File::open(model("tiny-random-llama-kq-Q4_K_M.gguf"));
  EXPECT_EQ(split_units(*f32, ModelConfig::from_gguf(*f32)).heads, 1);
  const auto u8 = split_units(*q8, ModelConfig::from_gguf(*q8));
  EXPECT_EQ(u8.heads, 4);  // Q8_0 attn_output: 32 columns = 4 heads of 8
  EXPECT_EQ(u8.ff, 1);     // ffn_down is F16
  const auto uk = split_units(*q4k, ModelConfig::from_gguf(*q4k));
  EXPECT_EQ(uk.heads, 8);  // 256-column K-quant blocks = 8 heads of 32
  EXPECT_EQ(uk.ff, 256);
}

TEST(Planner, TensorParallelSlicesWithReplicatedKvHeads) {
  auto f = gguf::File::open(model("stories260K.gguf"));  // 8 heads, 4 KV heads
  const auto p3 = uniform_plan(*f, 3, 1);
  ASSERT_EQ(p3.ranks.size(), 3u);
  EXPECT_EQ(p3.ranks[0].heads, (Range{0, 3}));
  EXPECT_EQ(p3.ranks[0].kv_heads, (Range{0, 2}));
  EXPECT_EQ(p3.ranks[1].heads, (Range{3, 6}));
  EXPECT_EQ(p3.ranks[1].kv_heads, (Range{1, 3}));  // KV head 1 on ranks 0 and 1
  EXPECT_EQ(p3.ranks[2].vocab_rows.end, 512);
  EXPECT_EQ(p3.all_reduces_per_token, 10);
  const auto hybrid = uniform_plan(*f, 2, 2);
  EXPECT_EQ(hybrid.ranks[0].layers, (Range{0, 3}));
  EXPECT_EQ(hybrid.ranks[3].layers, (Range{3, 5}));
  EXPECT_EQ(hybrid.stage_of(3), 1);
  EXPECT_EQ(hybrid.tp_index(3), 1);
  EXPECT_GT(hybrid.wire_bytes_per_token, hybrid.min_wire_bytes_per_token * 0.99);
  EXPECT_GT(hybrid.pipelined_tok_s, hybrid.single_seq_tok_s);
}

TEST(Planner, ImpossibleSplitsAreClearErrors) {
  auto q8 = gguf::File::open(model("stories260K-Q8_0.gguf"));
  PlanRequest r;
  r.tp = 4;
  EXPECT_NE(error_of([&] { make_plan(*q8, nodes(4), r); }).find("cannot use tp 4"), std::string::npos);
  r.tp = 2;
  r.pp = 2;
  EXPECT_NE(error_of([&] { make_plan(*q8, nodes(3), r); }).find("needs 4 nodes, 3 given"), std::string::npos);
  r = {};
  r.layers = {2, 2};
  EXPECT_NE(error_of([&] { make_plan(*q8, nodes(2), r); }).find("add up to 4 but the model has 5"), std::string::npos);
  r.layers = {4, 1};
  const auto p = make_plan(*q8, nodes(2), r);
  EXPECT_EQ(p.pp, 2);
  EXPECT_EQ(p.ranks[1].layers, (Range{4, 5}));
  r = {};
  r.pp = 6;
  EXPECT_NE(error_of([&] { make_plan(*q8, nodes(6), r); }).find("6 stages for a model of 5 layers"),
            std::string::npos);
}

// Tensor-parallel ranks hold margins of their neighbours' FFN and output
// rows (parallel/row_balance.h), unless asked for none, over a slow link (a
// lossy wire type), or where the margins would not fit and the rows alone do.
TEST(Planner, HoldsRowBalanceMarginsWhereTheyFit) {
  auto f = gguf::File::open(model("stories260K.gguf"));
  PlanRequest r;
  r.tp = 2;
  const auto roomy = make_plan(*f, nodes(2), r);
  EXPECT_NE(roomy.ranks[0].vocab_held, roomy.ranks[0].vocab_rows);
  r.balance_margin = 0;
  const auto none = make_plan(*f, nodes(2), r);
  EXPECT_EQ(none.ranks[0].vocab_held, none.ranks[0].vocab_rows);
  auto small = nodes(2);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_LT(none.costs[i].memory_bytes(), roomy.costs[i].memory_bytes());
    small[i].memory_bytes = (none.costs[i].memory_bytes() + roomy.costs[i].memory_bytes()) / 2;
  }
  r.balance_margin = kDefaultBalanceMargin;
  const auto tight = make_plan(*f, small, r);
  EXPECT_EQ(tight.ranks[0].vocab_held, tight.ranks[0].vocab_rows);
  EXPECT_EQ(tight.costs[1].memory_bytes(), none.costs[1].memory_bytes());
  EXPECT_NE(tight.notes.back().find("no row-balance margins"), std::string::npos);
  r.wire_type = DType::BF16;
  EXPECT_EQ(make_plan(*f, nodes(2), r).ranks[1].vocab_held, roomy.ranks[1].vocab_rows);
}

TEST(Planner, RefusesWhatDoesNotFitUnlessForced) {
  auto f = gguf::File::open(model("stories260K.gguf"));
  PlanRequest r;
  r.tp = 2;
  r.n_ctx = 1 << 20;  // a huge KV cache
  const auto small = nodes(2, 0.05);
  const std::string e = error_of([&] { make_plan(*f, small, r); });
  EXPECT_NE(e.find("does not fit"), std::string::npos) << e;
  // The least it needs: without row-balance margins.
  EXPECT_NE(e.find("needs 640.6 MiB but has 51.2 MiB"), std::string::npos) << e;
  // Small figures keep their digits: a tiny model on nodes of 1 MiB.
  PlanRequest tiny;
  tiny.tp = 2;
  const std::string t = error_of([&] { make_plan(*f, nodes(2, 1.0 / 1024), tiny); });
  EXPECT_NE(t.find(" MiB but has 1.0 MiB"), std::string::npos) << t;
  EXPECT_EQ(t.find("0.00 GiB"), std::string::npos) << t;
  r.force = true;
  const auto p = make_plan(*f, small, r);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.describe(ModelConfig::from_gguf(*f)).find("--force"), std::string::npos);
}

TEST(Planner, AutoUsesFewestStagesThatFit) {
  auto q8 = gguf::File::open(model("stories260K-Q8_0.gguf"));  // tp ≤ 2 (Q8_0 attn_output blocks)
  PlanRequest r;
  r.n_ctx = 2048;
  r.n_seq = 64;  // KV cache: 5 layers × 64 × 2048 × 4 KV heads × 16 × 4 B = 160 MiB
  const auto roomy = make_plan(*q8, nodes(4, 1), r);
  EXPECT_EQ(roomy.pp, 1);
  const auto tight = make_plan(*q8, nodes(4, 0.06), r);  // tp 2 × pp 1 needs 80 MiB per node
  EXPECT_EQ(tight.pp, 2);
  EXPECT_EQ(tight.tp, 2);
  EXPECT_TRUE(tight.fits);
  auto f = gguf::File::open(model("stories260K.gguf"));
  // A very slow link makes tensor parallelism lose: one node does it alone.
  auto slow = nodes(2, 1);
  for (auto& n : slow) n.link_latency_us = 1e5;
  r.n_seq = 1;
  EXPECT_EQ(make_plan(*f, slow, r).tp, 1);
  auto fast = nodes(2, 1);
  for (auto& n : fast) {
    n.link_latency_us = 0.001;
    n.link_bandwidth_gbs = 1000;
  }
  EXPECT_EQ(make_plan(*f, fast, r).tp, 2);
}

TEST(Planner, FasterNodesGetMoreLayersAndRows) {
  auto f = gguf::File::open(model("tiny-random-llama31.gguf"));  // 8 heads, n_ff 256, 2 layers
  auto v = nodes(2);
  v[0].memory_bandwidth_gbs = 60;
  v[1].memory_bandwidth_gbs = 20;
  PlanRequest r;
  r.tp = 2;
  const auto p = make_plan(*f, v, r);
  EXPECT_EQ(p.ranks[0].heads, (Range{0, 6}));
  EXPECT_EQ(p.ranks[0].kv_heads, (Range{0, 2}));
  EXPECT_EQ(p.ranks[1].kv_heads, (Range{1, 2}));
  EXPECT_EQ(p.ranks[0].ff_rows, (Range{0, 192}));
}

TEST(Planner, ExpertsSplitWholeByMemoryOrByRows) {
  auto f = gguf::File::open(model("tiny-random-qwen3moe.gguf"));  // 8 experts of 64 rows, top-2
  auto v = nodes(2);
  v[0].memory_bytes = 3 * v[1].memory_bytes;
  PlanRequest r;
  r.ep = 2;
  const auto ep = make_plan(*f, v, r);
  EXPECT_EQ(ep.expert_split, ExpertSplit::Experts);
  EXPECT_EQ(ep.ranks[0].experts, (Range{0, 6}));  // three times the memory: three times the experts, less one
  EXPECT_EQ(ep.ranks[1].experts, (Range{6, 8}));
  EXPECT_EQ(ep.ranks[1].expert_rows, (Range{0, 64}));
  EXPECT_EQ(ep.ranks[1].heads, (Range{2, 4}));  // attention heads split as in tensor parallel
  EXPECT_NE(ep.describe(ModelConfig::from_gguf(*f)).find("whole experts per rank (expert parallel), by node memory; "
                                                         "rank 0: [0, 6), 1: [6, 8)"),
            std::string::npos);
  r = {};
  r.tp = 2;
  const auto tp = make_plan(*f, v, r);
  EXPECT_EQ(tp.expert_split, ExpertSplit::Rows);
  EXPECT_EQ(tp.ranks[1].experts, (Range{0, 8}));
  EXPECT_EQ(tp.ranks[1].expert_rows, (Range{32, 64}));
  // Top-2 routing leaves a rank of two idle too often: left to the planner, tp 2 splits rows.
  r = {};
  r.pp = 1;
  const auto autop = make_plan(*f, nodes(2), r);
  EXPECT_EQ(autop.tp, 2);
  EXPECT_EQ(autop.expert_split, ExpertSplit::Rows);
  // deepseek2: the shared expert and the leading dense layer split by rows in both modes.
  auto d = gguf::File::open(model("tiny-random-deepseek2.gguf"));
  r = {};
  r.ep = 2;
  const auto dp = make_plan(*d, nodes(2), r);
  EXPECT_EQ(dp.ranks[1].experts, (Range{4, 8}));
  EXPECT_EQ(dp.ranks[1].shared_rows, (Range{16, 32}));
  EXPECT_EQ(dp.ranks[1].ff_rows, (Range{64, 128}));
  EXPECT_EQ(dp.ranks[1].kv_heads, (Range{0, 1}));  // the latent is replicated
}

// A quantized file whose experts are one ffn_down_exps block wide cannot
// split their rows: --tp says so, and the automatic choice takes whole experts.
TEST(Planner, ExpertRowsFollowQuantBlocks) {
  const std::string path = ::testing::TempDir() + "shardlm_planner_qwen3moe_q4_0.gguf";
  ASSERT_EQ(std::system((std::string(shardlm::test_paths::shardlm_binary()) + " synth --preset tiny-qwen3moe --type q4_0 -o " + path +
                         " > /dev/null").c_str()),
            0);
  auto f = gguf::File::open(path);
  EXPECT_EQ(split_units(*f, ModelConfig::from_gguf(*f)).expert_ff, 32);
  PlanRequest r;
  r.tp = 2;
  const std::string e = error_of([&] { make_plan(*f, nodes(2), r); });
  EXPECT_NE(e.find("cannot use tp 2: 32 rows per expert split in units of 32 (ffn_down_exps blocks)"),
            std::string::npos)
      << e;
  auto fast = nodes(2);
  for (auto& n : fast) n.link_latency_us = 0.001;
  r.tp = 0;
  r.pp = 1;
  const auto p = make_plan(*f, fast, r);  // pp 1 on 2 nodes: tp 2, the split left to the planner
  EXPECT_EQ(p.tp, 2);
  EXPECT_EQ(p.expert_split, ExpertSplit::Experts);
  std::filesystem::remove(path);
}

// A synth preset's header (no weights: a sparse file) with one layer.
std::unique_ptr<gguf::File> preset_layer(const std::string& preset, const std::string& type) {
  // The pid keeps tests that ctest runs at once off each other's file.
  const std::string path =
      ::testing::TempDir() + "shardlm_planner_" + preset + "_" + type + "_" + std::to_string(getpid()) + ".gguf";
  const std::string cmd = std::string(shardlm::test_paths::shardlm_binary()) + " synth --no-weights --layers 1 --preset " + preset +
                          " --type " + type + " -o " + path + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) throw Error("synth failed: " + cmd);
  auto f = gguf::File::open(path);
  std::filesystem::remove(path);
  return f;
}

// Left to the planner, the MoE split weighs whole experts' expected routing
// imbalance against the rows' block granularity, at the request's sequences.
TEST(Planner, ExpertSplitWeighsRoutingImbalanceAgainstRowGranularity) {
  PlanRequest r;
  r.pp = 1;
  // Qwen3-30B-A3B Q4_0: 768 rows per expert split 384 + 384; 8 of 128 experts
  // over 2 ranks put ~26 % more pairs than the mean on the busiest at one token.
  auto q40 = preset_layer("qwen3-30b-a3b", "q4_0");
  const ModelConfig c = ModelConfig::from_gguf(*q40);
  const Plan one = make_plan(*q40, nodes(2), r);
  EXPECT_EQ(one.expert_split, ExpertSplit::Rows);
  EXPECT_GT(one.other_split_tok_s, 0);
  EXPECT_LT(one.other_split_tok_s, one.single_seq_tok_s);
  const std::string text = one.describe(c);
  EXPECT_NE(text.find("the busiest rank of a group holds +0 % of the mean rank's rows"), std::string::npos) << text;
  EXPECT_NE(text.find("experts: rows chosen over whole experts"), std::string::npos) << text;
  PlanRequest ep = r;
  ep.ep = 2;
  const Plan whole = make_plan(*q40, nodes(2), ep);
  EXPECT_NEAR(whole.expert_imbalance, 1.265, 0.01);
  EXPECT_NE(whole.describe(c).find("expected to get +26 % of the mean rank's (token, expert) pairs at 1 token"),
            std::string::npos)
      << whole.describe(c);
  EXPECT_NEAR(whole.single_seq_tok_s, one.other_split_tok_s, 1e-9 * whole.single_seq_tok_s);

  // Q4_K: 768 rows are 3 blocks of 256, split 512 + 256 (+33 %): whole
  // experts win once a step carries a few tokens.
  auto q4k = preset_layer("qwen3-30b-a3b", "q4_k");
  r.n_seq = 8;
  const Plan batched = make_plan(*q4k, nodes(2), r);
  EXPECT_EQ(batched.expert_split, ExpertSplit::Experts);
  EXPECT_LT(batched.expert_imbalance_step, 1.15);
  EXPECT_NE(batched.describe(c).find("at 8 tokens"), std::string::npos);
}

// Whole experts follow node memory, rows follow bandwidth: where only the
// memory-weighted split fits, the planner takes it.
TEST(Planner, ExpertSplitTakesWhatFits) {
  auto q40 = preset_layer("qwen3-30b-a3b", "q4_0");
  PlanRequest r;
  r.pp = 1;
  r.ep = 2;
  auto v = nodes(2);
  const Plan even = make_plan(*q40, v, r);
  const int64_t need = even.costs[1].memory_bytes();
  v[1].memory_bytes = need * 4 / 5;  // half of the experts do not fit on the second node,
  v[0].memory_bytes = need * 4;      // a memory-weighted share does
  r.ep = 0;
  const Plan p = make_plan(*q40, v, r);
  EXPECT_EQ(p.expert_split, ExpertSplit::Experts);
  EXPECT_LT(p.ranks[1].experts.size(), 64);
  EXPECT_TRUE(p.fits);
}

TEST(Planner, ImpossibleExpertSplitsAreClearErrors) {
  auto mix = gguf::File::open(model("tiny-random-mixtral.gguf"));  // 4 experts, 4 heads
  PlanRequest r;
  r.ep = 5;
  std::string e = error_of([&] { make_plan(*mix, nodes(5), r); });
  EXPECT_NE(e.find("cannot use ep 5: 4 experts cannot give each of 5 ranks a whole expert"), std::string::npos) << e;
  r.tp = 2;
  r.ep = 2;
  e = error_of([&] { make_plan(*mix, nodes(2), r); });
  EXPECT_NE(e.find("not both"), std::string::npos) << e;
  auto dense = gguf::File::open(model("stories260K.gguf"));
  r = {};
  r.ep = 2;
  e = error_of([&] { make_plan(*dense, nodes(2), r); });
  EXPECT_NE(e.find("--ep 2: this llama model has no experts"), std::string::npos) << e;
  // A plan that gives a rank no experts is refused where weights are mapped.
  const ModelConfig c = ModelConfig::from_gguf(*mix);
  RankPlan bad = RankPlan::whole(c);
  bad.experts = {2, 2};
  e = error_of([&] { bad.validate(c); });
  EXPECT_NE(e.find("expert range [2, 2)"), std::string::npos) << e;
}

TEST(Nodes, ListHostfileAndJson) {
  const auto l = nodes_from_list("127.0.0.1:7001,10.1.1.1:7002");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_LT(l[0].link_latency_us, l[1].link_latency_us);  // loopback
  EXPECT_NE(error_of([] { nodes_from_list("a:1,,b:2"); }).find("entry 2 is empty"), std::string::npos);
  EXPECT_NE(error_of([] { nodes_from_list("a:1, ,b:2"); }).find("entry 2 is empty"), std::string::npos);
  const auto spaced = nodes_from_list("127.0.0.1:7001, 10.1.1.1:7002 ");
  ASSERT_EQ(spaced.size(), 2u);
  EXPECT_EQ(spaced[1].name, "10.1.1.1:7002");
  const auto j = nodes_from_json_text(
      R"({"defaults": {"link_latency_us": 20}, "nodes": [{"name": "big", "memory_gb": 64, "bandwidth_gbs": 80},
          {"name": "small", "memory_gb": 8, "count": 2}]})",
      "t.json");
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0].memory_bytes, 64ll << 30);
  EXPECT_EQ(j[0].link_latency_us, 20);
  EXPECT_EQ(j[2].name, "small.1");
  EXPECT_NE(error_of([] { nodes_from_json_text(R"([{"memroy_gb": 1}])", "t.json"); }).find("unknown key 'memroy_gb'"),
            std::string::npos);
  EXPECT_NE(error_of([] { nodes_from_json_text(R"([{"memory_gb": -1}])", "t.json"); }).find("node 0: 'memory_gb'"),
            std::string::npos);
  EXPECT_NE(error_of([] { nodes_from_json_text("{", "t.json"); }).find("t.json: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([] { nodes_from_json_text(std::string(100000, '[') + std::string(100000, ']'), "t.json"); })
                .find("t.json: arrays and objects nested more than 128 deep"),
            std::string::npos);
}

}  // namespace
}  // namespace shardlm::parallel

namespace shardlm::parallel {
namespace {

TEST(Planner, WireTypeByLinkSpeedUnlessRequested) {
  auto f = gguf::File::open(model("stories260K.gguf"));
  PlanRequest r;
  r.tp = 2;
  auto v = nodes(2);
  for (double gbs : {4.0, 1.25}) {
    for (auto& n : v) n.link_bandwidth_gbs = gbs;
    EXPECT_EQ(make_plan(*f, v, r).wire_type, DType::F32) << gbs;
  }
  v[1].link_bandwidth_gbs = 0.125;  // one 1 GbE node decides
  EXPECT_EQ(make_plan(*f, v, r).wire_type, DType::BF16);
  v[0].link_bandwidth_gbs = 0.01;
  const auto slow = make_plan(*f, v, r);
  EXPECT_EQ(slow.wire_type, DType::Q8_0);
  r.wire_type = DType::F16;
  const auto asked = make_plan(*f, v, r);
  EXPECT_EQ(asked.wire_type, DType::F16);
  // Fewer bytes predicted for the smaller payload (stories: n_embd 64, 5 layers).
  EXPECT_LT(slow.wire_bytes_per_token, asked.wire_bytes_per_token);
  EXPECT_EQ(slow.wire_bytes_per_token, 2 * 5 * 2 * 68.0);  // 2 per layer, 2 ranks, 64 values as q8_0
  // A model with experts stays at bf16 on the slowest links (8-bit sums can change its routing).
  auto moe = gguf::File::open(model("synthetic/tiny-random-qwen3moe.gguf"));
  PlanRequest m;
  m.tp = 2;
  EXPECT_EQ(make_plan(*moe, v, m).wire_type, DType::BF16);
  m.wire_type = DType::Q8_0;
  EXPECT_EQ(make_plan(*moe, v, m).wire_type, DType::Q8_0) << "asked for, it is used";
}

TEST(Planner, MeasuredKernelRatesSetThePredictedSpeed) {
  auto f = gguf::File::open(model("stories260K.gguf"));  // F32 matrices
  PlanRequest r;
  r.tp = 1;
  r.pp = 2;
  r.n_seq = 4;
  auto v = nodes(2);
  for (auto& n : v) n.token_costs = {1e-12, 1e-12, 1e-12};  // the matrices alone (token work: token_costs_test.cpp)
  const auto by_bandwidth = make_plan(*f, v, r);
  for (auto& n : v) {
    n.kernel_rates.gbs[{DType::F32, 1}] = n.memory_bandwidth_gbs / 4;
    n.kernel_rates.gbs[{DType::F32, 2}] = n.memory_bandwidth_gbs / 2;
  }
  const auto measured = make_plan(*f, v, r);
  EXPECT_NEAR(measured.costs[0].compute_seconds, 4 * by_bandwidth.costs[0].compute_seconds,
              1e-6 * by_bandwidth.costs[0].compute_seconds);
  EXPECT_LT(measured.single_seq_tok_s, by_bandwidth.single_seq_tok_s);
  // 4 sequences over 2 stages: micro-batches of 2 tokens at the 2-token rate.
  EXPECT_EQ(measured.pipelined_seqs, 4);
  EXPECT_GT(measured.pipelined_tok_s, 1.5 * measured.single_seq_tok_s);
  // 2 sequences: micro-batches of one token, which overlap on the stages but
  // not across steps: a step is both stages' time plus the slowest's once more.
  r.n_seq = 2;
  const auto two = make_plan(*f, v, r);
  const double stages = two.stage_seconds[0] + two.stage_seconds[1];
  const double slowest = std::max(two.stage_seconds[0], two.stage_seconds[1]);
  EXPECT_NEAR(two.pipelined_tok_s, 2 / (stages + slowest), 1e-9 * two.pipelined_tok_s);
}

// Mixture of experts: memory holds every expert, a decoded token reads the
// n_used chosen ones; latent attention caches one row of kv_lora + rope
// values per token and layer.
TEST(Planner, ExpertsInMemoryAllReadPerTokenTheChosen) {
  for (const char* name : {"tiny-random-qwen3moe.gguf", "tiny-random-deepseek2.gguf"}) {
    SCOPED_TRACE(name);
    auto f = gguf::File::open(model(name));
    const auto c = ModelConfig::from_gguf(*f);
    ASSERT_TRUE(c.has_experts());
    uint64_t experts = 0, matrices = 0;
    for (const auto& t : f->tensors()) {
      if (t.ne[1] == 1 || t.name == "token_embd.weight" || t.name.ends_with("exp_probs_b.bias")) continue;
      (t.name.find("_exps.") != std::string::npos ? experts : matrices) += t.n_bytes;
    }
    if (c.tied_output) matrices += f->require_tensor("token_embd.weight").n_bytes;  // the output matrix
    PlanRequest req;
    req.n_ctx = 256;
    const Plan p = make_plan(*f, nodes(1), req);
    ASSERT_EQ(p.size(), 1);
    const RankCost& k = p.costs[0];
    const int64_t embd = int64_t(f->require_tensor("token_embd.weight").n_bytes);
    EXPECT_EQ(k.weight_bytes, int64_t(matrices + experts) + embd);
    const double active = double(c.moe.n_expert_used) / double(c.moe.n_expert);
    EXPECT_NEAR(double(k.bytes_per_token), double(matrices) + active * double(experts), 1.0);
    EXPECT_LT(k.bytes_per_token, k.weight_bytes - embd);
    const int64_t kv_row = c.latent_attention() ? c.attention.latent.kv_lora_rank + c.attention.latent.qk_rope_dim
                                                : c.n_head_kv * (c.head_dim_k + c.head_dim_v);
    EXPECT_EQ(k.kv_bytes, c.n_layer * req.n_ctx * kv_row * 4);
    const std::string text = p.describe(c);
    EXPECT_NE(text.find(fmt::format("experts: {} of {} per token", c.moe.n_expert_used, c.moe.n_expert)),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("latent attention keeps") != std::string::npos, c.latent_attention()) << text;
  }
}

// A step of several tokens is expected to touch more of the experts: the
// predicted time per token falls with the batch, less than for a dense model.
TEST(Planner, ExpertsReadPerStepGrowWithItsTokens) {
  auto f = gguf::File::open(model("tiny-random-qwen3moe.gguf"));
  const auto c = ModelConfig::from_gguf(*f);
  const RankPlan whole = RankPlan::whole(c);
  const auto w = ModelWeights::map(*f, c, whole);
  auto expert_share = [&](int64_t tokens) {
    double share = 0;
    w.for_each_matrix(tokens, [&](const MatrixView& m, double s, bool) {
      if (m.data == w.layers.back().experts.gate.all.data) share = s;
    });
    return share;
  };
  const double p1 = double(c.moe.n_expert_used) / double(c.moe.n_expert);
  EXPECT_DOUBLE_EQ(expert_share(1), p1);
  EXPECT_DOUBLE_EQ(expert_share(4), 1 - std::pow(1 - p1, 4));
  EXPECT_GT(expert_share(64), 0.99);
}

// A budget smaller than one layer of width 2048 measures on a narrower layer
// instead of overrunning it (a worker at start measures every common type in
// 32 MiB; a 2048-wide F32 layer is 243 MB): every type and token count gets a rate.
TEST(KernelRates, MeasuredOnALayerWithinTheBudget) {
  const KernelRates r = measure_kernel_rates({DType::Q4_0, DType::F32}, nullptr, size_t(4) << 20);
  for (DType t : {DType::Q4_0, DType::F32})
    for (int tokens : {1, 2, 4, 8}) EXPECT_GT(r.gbs.at({t, tokens}), 0) << dtype_name(t) << " " << tokens;
  EXPECT_EQ(r.gbs.size(), 8u);
}

// Ranks that share the host measure together (one measurer each, with its
// own pool when threads are given), as pipeline stages or as one
// tensor-parallel group meeting at every segment: still one finite rate per
// type and token count, the mean rank's.
TEST(KernelRates, MeasuredForRanksStreamingAtOnce) {
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
    for (int tp_group : {1, 2}) {
      const KernelRates r = measure_kernel_rates({DType::Q8_0}, p, size_t(4) << 20, 2, tp_group);
      EXPECT_EQ(r.gbs.size(), 4u);
      for (int tokens : {1, 2, 4, 8}) {
        EXPECT_GT(r.gbs.at({DType::Q8_0, tokens}), 0) << tokens << " tokens, groups of " << tp_group;
        EXPECT_LT(r.gbs.at({DType::Q8_0, tokens}), 1e6) << tokens << " tokens, groups of " << tp_group;
      }
    }
  EXPECT_THROW(measure_kernel_rates({DType::Q8_0}, nullptr, size_t(4) << 20, 3, 2), Error);
}

TEST(KernelRates, JsonRoundTripAndErrors) {
  KernelRates k;
  k.gbs[{DType::Q4_0, 1}] = 9.5;
  k.gbs[{DType::Q4_0, 2}] = 17;
  k.gbs[{DType::Q6_K, 8}] = 3;
  const auto back = KernelRates::from_json(k.to_json(), "t");
  EXPECT_EQ(back.gbs, k.gbs);
  EXPECT_EQ(back.rate(DType::Q4_0, 2), 17);
  // Seconds per byte are linear in the tokens between and past measured counts.
  EXPECT_DOUBLE_EQ(1 / back.rate(DType::Q4_0, 3), 1 / 17.0 + (1 / 17.0 - 1 / 9.5));
  EXPECT_DOUBLE_EQ(back.rate(DType::Q6_K, 4), 3);  // below the only count: its rate
  EXPECT_DOUBLE_EQ(back.rate(DType::Q6_K, 64), 3.0 / 8);  // past it: time per token
  EXPECT_EQ(back.rate(DType::Q8_0, 1), 0);  // not measured
  // A type this build does not know is skipped; malformed rows are errors.
  EXPECT_TRUE(KernelRates::from_json(nlohmann::json::parse(R"({"Q9_9": [1, 2, 3]})"), "t").empty());
  EXPECT_NE(error_of([] { KernelRates::from_json(nlohmann::json::parse(R"({"Q4_0": [1, 2]})"), "w1"); })
                .find("w1: kernel_rates[Q4_0]"),
            std::string::npos);
  EXPECT_NE(error_of([] { KernelRates::from_json(nlohmann::json::parse(R"({"Q4_0": [1, -2, 3]})"), "w1"); })
                .find("out of range"),
            std::string::npos);
  const auto n = nodes_from_json_text(R"([{"name": "a", "kernel_rates": {"Q4_0": [10, 18, 4]}}])", "n.json");
  EXPECT_EQ(n[0].kernel_rates.rate(DType::Q4_0, 1), 10);
  EXPECT_EQ(n[0].kernel_rates.rate(DType::Q4_0, 8), 4);  // an earlier build's [1, 2, 8]
  EXPECT_EQ(KernelRates::from_json(nlohmann::json::parse(R"({"Q4_0": [1, 2, 3, 4]})"), "t").rate(DType::Q4_0, 4), 3);
}

}  // namespace
}  // namespace shardlm::parallel
