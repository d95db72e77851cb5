// The plan in the Job message: the wire type travels with it, and a plan
// from a coordinator that predates it means exact f32.
#include <gtest/gtest.h>

#include "cluster/protocol.h"
#include "core/error.h"

namespace shardlm::cluster {
namespace {

parallel::Plan two_rank_plan() {
  parallel::Plan p;
  p.tp = 2;
  for (int i = 0; i < 2; ++i) {
    RankPlan r;
    r.layers = {0, 2};
    r.heads = {i * 4, i * 4 + 4};
    r.kv_heads = {i, i + 1};
    r.ff_rows = {i * 64, i * 64 + 64};
    r.vocab_rows = {i * 100, i * 100 + 100};
    p.ranks.push_back(r);
  }
  return p;
}

TEST(PlanJson, CarriesTheWireType) {
  auto p = two_rank_plan();
  p.wire_type = DType::Q8_0;
  const auto back = plan_from_json(plan_to_json(p), "w");
  EXPECT_EQ(back.wire_type, DType::Q8_0);
  EXPECT_EQ(back.ranks[1].ff_rows, (Range{64, 128}));
  auto old = plan_to_json(two_rank_plan());
  old.erase("wire_type");
  EXPECT_EQ(plan_from_json(old, "w").wire_type, DType::F32);
  auto bad = plan_to_json(p);
  bad["wire_type"] = "q4_0";
  try {
    plan_from_json(bad, "worker 1");
    ADD_FAILURE() << "q4_0 accepted as a wire type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker 1: malformed plan"), std::string::npos) << e.what();
  }
}

// The held margins (parallel/row_balance.h) travel with each rank; a plan
// without them (an older coordinator) holds the own rows alone.
TEST(PlanJson, CarriesTheHeldRows) {
  auto p = two_rank_plan();
  p.ranks[0].ff_held = {0, 128};
  p.ranks[1].vocab_held = {36, 200};
  const auto back = plan_from_json(plan_to_json(p), "w");
  EXPECT_EQ(back.ranks[0].ff_held, (Range{0, 128}));
  EXPECT_EQ(back.ranks[1].vocab_held, (Range{36, 200}));
  auto old = plan_to_json(p);
  for (auto& r : old["ranks"]) {
    r.erase("ff_held");
    r.erase("vocab_held");
  }
  const auto older = plan_from_json(old, "w");
  EXPECT_EQ(older.ranks[0].ff_held, older.ranks[0].ff_rows);
  EXPECT_EQ(older.ranks[1].vocab_held, older.ranks[1].vocab_rows);
}

// Expert ranges travel with each rank; a plan without them (an older
// coordinator) means a model without experts.
TEST(PlanJson, CarriesTheExpertRanges) {
  auto p = two_rank_plan();
  p.ranks[1].experts = {4, 8};
  p.ranks[1].expert_rows = {0, 64};
  p.ranks[1].shared_rows = {32, 64};
  const auto back = plan_from_json(plan_to_json(p), "w");
  EXPECT_EQ(back.ranks[1].experts, (Range{4, 8}));
  EXPECT_EQ(back.ranks[1].expert_rows, (Range{0, 64}));
  EXPECT_EQ(back.ranks[1].shared_rows, (Range{32, 64}));
  auto old = plan_to_json(p);
  for (auto& r : old["ranks"]) r.erase("experts");
  EXPECT_EQ(plan_from_json(old, "w").ranks[1].experts, (Range{0, 0}));
  auto bad = plan_to_json(p);
  bad["ranks"][1]["expert_rows"] = {9, 3};
  try {
    plan_from_json(bad, "worker 1");
    ADD_FAILURE() << "a reversed range accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker 1: malformed plan"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardlm::cluster
