#include <fmt/format.h>

#include <algorithm>

#include "parallel/planner.h"
#include "parallel/wire_format.h"

namespace shardlm::parallel {
namespace {

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / double(1 << 20)); }

}  // namespace

std::string Plan::describe(const ModelConfig& c) const {
  std::string s = fmt::format("model: {}\nlayout: tp {} × pp {} = {} rank(s)\n", c.summary(), tp, pp, size());
  s += fmt::format("{:>4} {:>5} {:>3} {:<22} {:<44} {:>11} {:>11} {:>11} {:>11} {:>9}\n", "rank", "stage", "tp",
                   "node", "slices", "weights", "read/token", "kv cache", "node mem", "ms/token");
  for (int r = 0; r < size(); ++r) {
    const RankCost& k = costs[size_t(r)];
    const RankPlan& p = ranks[size_t(r)];
    const std::string slices =
        fmt::format("L[{},{}) h[{},{}) kv[{},{}) ff[{},{}) v[{},{})", p.layers.begin, p.layers.end, p.heads.begin,
                    p.heads.end, p.kv_heads.begin, p.kv_heads.end, p.ff_rows.begin, p.ff_rows.end, p.vocab_rows.begin,
                    p.vocab_rows.end);
    s += fmt::format("{:>4} {:>5} {:>3} {:<22} {:<44} {:>11} {:>11} {:>11} {:>11} {:>9.3f}\n", r, stage_of(r),
                     tp_index(r), nodes[size_t(r)].name.substr(0, 22), slices, mib(double(k.weight_bytes)),
                     mib(double(k.bytes_per_token)), mib(double(k.kv_bytes)),
                     mib(double(nodes[size_t(r)].memory_bytes)), k.compute_seconds * 1e3);
  }
  if (c.has_experts()) {
    double held = 0, read = 0;
    for (const RankCost& k : costs) {
      held += double(k.weight_bytes);
      read += double(k.bytes_per_token);
    }
    s += fmt::format("experts: {} of {} per token; weights in memory {:.2f} GiB (every expert), read per decoded token "
                     "{:.2f} GiB (the chosen experts: each rank reads {} / {} of the experts it holds, routing "
                     "assumed uniform)\n",
                     c.moe.n_expert_used, c.moe.n_expert, held / double(1 << 30), read / double(1 << 30),
                     c.moe.n_expert_used, c.moe.n_expert);
  }
  if (expert_split == ExpertSplit::Experts) {
    s += fmt::format("expert balance: whole experts; the busiest rank of a group is expected to get {:+.0f} % of the "
                     "mean rank's (token, expert) pairs at 1 token per step",
                     (expert_imbalance - 1) * 100);
    if (step_tokens > 1) s += fmt::format(", {:+.0f} % at {} tokens", (expert_imbalance_step - 1) * 100, step_tokens);
    s += " (routing taken as uniform)\n";
  } else if (expert_split == ExpertSplit::Rows) {
    int64_t most = 0, all = 0;
    for (int r = 0; r < tp; ++r) {
      most = std::max(most, ranks[size_t(r)].expert_rows.size());
      all += ranks[size_t(r)].expert_rows.size();
    }
    s += fmt::format("expert balance: every expert's rows split; the busiest rank of a group holds {:+.0f} % of the "
                     "mean rank's rows (quant blocks), whatever the routing\n",
                     (double(most) * tp / double(all) - 1) * 100);
  }
  if (c.latent_attention())
    s += fmt::format("kv cache: latent attention keeps {} values per token per layer (kv_lora_rank {} + rope {})\n",
                     c.head_dim_k, c.attention.latent.kv_lora_rank, c.attention.latent.qk_rope_dim);
  for (int st = 0; st < pp; ++st)
    s += fmt::format("stage {}: {:.3f} ms per token (compute + collectives + hand-off)\n", st,
                     stage_seconds[size_t(st)] * 1e3);
  s += fmt::format("all-reduces per token per TP rank: {}\n", all_reduces_per_token);
  s += fmt::format("activations on the wire as {}: {:.0f} bytes per token (minimum {:.0f} = 2 × {} layers × {} B × {} "
                   "tp hop(s) + {} stage hand-off(s))\n",
                   wire_type_name(wire_type), wire_bytes_per_token, min_wire_bytes_per_token, c.n_layer,
                   wire_row_bytes(wire_type, size_t(c.n_embd)), tp - 1, pp - 1);
  s += fmt::format("predicted decode: {:.1f} tok/s for one sequence", single_seq_tok_s);
  if (pipelined_seqs > 1)
    s += fmt::format(", {:.1f} tok/s for {} sequences decoded together", pipelined_tok_s, pipelined_seqs);
  s += "\n";
  for (const auto& n : notes) s += "note: " + n + "\n";
  return s;
}

}  // namespace shardlm::parallel
