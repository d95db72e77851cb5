// What one rank computes, and how it meets the other ranks. The forward pass
// (model/model.h) is written once against these: a single machine is the plan
// that holds everything, with no-op hooks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace shardlm {

struct ModelConfig;

struct Range {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

// Slices of the model held by one rank. Pipeline parallel splits `layers`
// into stages; tensor parallel splits heads, FFN rows and vocabulary rows.
// Mixture-of-experts layers split inside a tensor-parallel group in one of two
// ways: whole experts (expert parallel: `experts` a share, `expert_rows` all)
// or every expert's ff rows (`experts` all, `expert_rows` a share). Either
// way each rank's expert products are partial sums of the layer's output,
// reduced by the same all-reduce as a dense FFN's.
struct RankPlan {
  Range layers;      // [l0, l1): this pipeline stage's layers
  Range heads;       // query heads; any range (partial KV groups replicate their KV head)
  Range kv_heads;    // the KV heads of `heads`: [begin / group, ceil(end / group))
  Range ff_rows;     // rows of ffn_gate/ffn_up = columns of ffn_down
  // Rows of ffn_gate/ffn_up held: ff_rows and a margin into each neighbour's,
  // which this rank may compute for that neighbour (parallel/row_balance.h).
  Range ff_held;
  Range vocab_rows;  // rows of the output matrix: this rank's slice of the logits
  Range vocab_held;  // rows of the output matrix held: vocab_rows and margins, as ff_held
  Range experts;      // whole experts held in every MoE layer (empty without experts)
  Range expert_rows;  // of each held expert: rows of gate/up = columns of down
  Range shared_rows;  // rows of the shared-expert FFN (n_shared · n_ff_expert), split as a dense FFN; may be empty

  static RankPlan whole(const ModelConfig& c);
  bool first_stage() const { return layers.begin == 0; }
  bool last_stage(const ModelConfig& c) const;
  // Throws Error naming the first inconsistent range.
  void validate(const ModelConfig& c) const;
  std::string to_string() const;
};

enum class SharedRows { Ffn, Vocab };

struct ForwardHooks {
  // Sums `count` partial values in place across the tensor-parallel ranks.
  // Called after the attention output projection and after the FFN down
  // projection (dense or experts), each with n_tokens × n_embd values. Empty
  // on a single rank.
  std::function<void(float* data, size_t count)> all_reduce;
  // Tensor parallel over uneven cores (parallel/row_balance.h): the rows of
  // a column-parallel product this rank computes in a forward of n_tokens
  // (FFN: a dense FFN's gate/up, inside RankPlan::ff_held; Vocab: the
  // output's, inside vocab_held, for the n_tokens entries with logits).
  // Rows outside its own go to the neighbour owning them (side -1: the rank
  // before, +1: the rank after) as n_tokens × rows values (the FFN's
  // activated); own rows it does not compute come from that neighbour.
  // Empty: its own rows, nothing sent.
  std::function<Range(SharedRows what, int64_t n_tokens)> rows;
  std::function<void(SharedRows what, int side, const float* values, size_t count)> send_rows;
  std::function<void(SharedRows what, int side, float* values, size_t count)> recv_rows;
};

}  // namespace shardlm
