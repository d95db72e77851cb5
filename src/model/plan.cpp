#include "model/plan.h"

#include <fmt/format.h>

#include <string_view>

#include "core/error.h"
#include "model/config.h"

namespace shardlm {

RankPlan RankPlan::whole(const ModelConfig& c) {
  RankPlan p;
  p.layers = {0, c.n_layer};
  p.heads = {0, c.n_head};
  p.kv_heads = {0, c.n_head_kv};
  p.ff_rows = {0, c.n_ff};
  p.ff_held = p.ff_rows;
  p.vocab_rows = {0, c.n_vocab};
  p.vocab_held = p.vocab_rows;
  if (c.has_experts()) {
    p.experts = {0, c.moe.n_expert};
    p.expert_rows = {0, c.moe.n_ff_expert};
    p.shared_rows = {0, c.moe.n_shared * c.moe.n_ff_expert};
  }
  return p;
}

bool RankPlan::last_stage(const ModelConfig& c) const { return layers.end == c.n_layer; }

void RankPlan::validate(const ModelConfig& c) const {
  auto check = [](std::string_view what, Range r, int64_t limit) {
    if (r.begin < 0 || r.end > limit || r.begin >= r.end)
      throw Error(fmt::format("rank plan: {} range [{}, {}) is not a non-empty part of [0, {})", what, r.begin,
                              r.end, limit));
  };
  check("layer", layers, c.n_layer);
  check("head", heads, c.n_head);
  check("kv-head", kv_heads, c.n_head_kv);
  // Rows, and the held rows around them (parallel/row_balance.h's margins).
  auto check_held = [&](std::string_view what, Range rows, Range held, int64_t limit) {
    check(fmt::format("{}-row", what), rows, limit);
    check(fmt::format("held {}-row", what), held, limit);
    if (held.begin > rows.begin || held.end < rows.end)
      throw Error(fmt::format("rank plan: held {} rows [{}, {}) do not cover the {} rows [{}, {})", what, held.begin,
                              held.end, what, rows.begin, rows.end));
  };
  check_held("ffn", ff_rows, ff_held, c.n_ff);
  check_held("vocab", vocab_rows, vocab_held, c.n_vocab);
  if (c.has_experts()) {
    check("expert", experts, c.moe.n_expert);
    check("expert-row", expert_rows, c.moe.n_ff_expert);
    // Empty: another rank of the group runs the shared experts.
    if (c.moe.n_shared > 0 && shared_rows.size() != 0)
      check("shared-expert-row", shared_rows, c.moe.n_shared * c.moe.n_ff_expert);
  } else if (experts.size() != 0 || expert_rows.size() != 0 || shared_rows.size() != 0) {
    throw Error("rank plan: expert ranges given for a model without experts");
  }
  const int64_t g = c.n_group();
  // A head range may cut a KV group (tensor parallel wider than n_head_kv):
  // then both ranks hold that KV head, a replica computed from the same weights.
  if (kv_heads.begin != heads.begin / g || kv_heads.end != (heads.end + g - 1) / g)
    throw Error(fmt::format("rank plan: heads [{}, {}) need kv-heads [{}, {}) with {} query heads per KV head, not [{}, {})",
                            heads.begin, heads.end, heads.begin / g, (heads.end + g - 1) / g, g, kv_heads.begin,
                            kv_heads.end));
}

std::string RankPlan::to_string() const {
  std::string s = fmt::format("layers [{},{}) heads [{},{}) kv [{},{}) ffn [{},{}) vocab [{},{})", layers.begin,
                              layers.end, heads.begin, heads.end, kv_heads.begin, kv_heads.end, ff_rows.begin,
                              ff_rows.end, vocab_rows.begin, vocab_rows.end);
  if (ff_held != ff_rows) s += fmt::format(" ffn held [{},{})", ff_held.begin, ff_held.end);
  if (vocab_held != vocab_rows) s += fmt::format(" vocab held [{},{})", vocab_held.begin, vocab_held.end);
  if (experts.size() > 0)
    s += fmt::format(" experts [{},{}) rows [{},{})", experts.begin, experts.end, expert_rows.begin, expert_rows.end);
  if (shared_rows.size() > 0) s += fmt::format(" shared [{},{})", shared_rows.begin, shared_rows.end);
  return s;
}

}  // namespace shardlm
