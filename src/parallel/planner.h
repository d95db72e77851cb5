// The layout of a model over nodes: tp × pp ranks (rank = stage · tp + t),
// each rank's slices (RankPlan), its memory, the wire type of activations,
// and a decode-speed prediction from a simple cost model (explained in docs
// and by Plan::notes):
//
//   stage time(T tokens) = max over its ranks (Σ_matrices bytes / rate(type, T)
//                                   + T · token work)
//              (whole experts: max over ranks of the rest + the expected
//               busiest-rank imbalance × the mean rank's routed experts)
//              + 2 · layers · all_reduce(tp, T · n_embd values)     when tp > 1
//              + hand-off of T encoded rows to the next stage       when not last
//   rate(type, T) = the node's measured kernel rate (parallel/kernel_rates.h),
//                   else its memory bandwidth
//   token work = its layers' element-wise work, KV store, attention over n_ctx / 2
//                cached positions, at the node's measured costs
//                (parallel/token_costs.h), else their bytes at its bandwidth
//   all_reduce = link latency · ceil(log2 tp) + bytes one rank sends / link bandwidth
//
// One sequence visits the stages in turn (tok/s = 1 / Σ stage times(1)); with
// n ≥ pp sequences a step carries pp micro-batches of m = ceil(n / pp) tokens
// that overlap on the stages but not across steps (DistributedSession), so a
// step lasts Σ stage times(m) + (pp − 1) · max stage time(m): tok/s = n / that.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/config.h"
#include "model/plan.h"
#include "parallel/row_balance.h"
#include "parallel/nodes.h"

namespace shardlm::gguf { class File; }

namespace shardlm::parallel {

// How the MoE layers split inside a tensor-parallel group (model/plan.h):
// whole experts per rank, weighted by node memory (expert parallel, --ep), or
// every expert's ff rows, weighted by node bandwidth (tensor parallel inside
// experts, --tp). Without either flag the planner costs both (where the
// shapes allow them) and takes the one that fits and predicts more tok/s at
// the request's sequence count; a tie goes to whole experts. The cost model
// charges whole experts their expected routing imbalance
// (parallel/expert_imbalance.h: the busiest rank's share of a step's
// (token, expert) pairs), rows their quant-block granularity (the busiest
// rank's rows). So one sequence of Qwen3-MoE (8 of 128 over 2 ranks: +26 %)
// splits rows, while whole experts win where rows split unevenly (K-quant
// blocks of 256 in 768 rows) or only they fit.
enum class ExpertSplit { None, Experts, Rows };

struct PlanRequest {
  int tp = 0;                   // 0: automatic; MoE layers split by expert rows
  int ep = 0;                   // --ep: tensor-parallel ranks that split MoE layers by whole experts (excludes tp)
  int pp = 0;                   // 0: automatic
  std::vector<int64_t> layers;  // layers per stage (--layers), empty: by node speed
  int64_t n_ctx = 4096;         // KV cache positions per sequence
  int64_t n_seq = 1;            // sequences decoded together
  DType kv_type = DType::F32;
  std::optional<DType> wire_type;  // activations on the wire (--wire-type); unset: by link speed
  // The share of each tp neighbour's dense gate/up rows a rank also holds, to
  // compute for it when it is slower (parallel/row_balance.h; 0: none).
  double balance_margin = kDefaultBalanceMargin;
  bool force = false;           // skip the memory check
};

struct RankCost {
  int64_t weight_bytes = 0;     // mapped weights this rank reads
  int64_t kv_bytes = 0;         // its KV cache at n_ctx × n_seq
  int64_t bytes_per_token = 0;  // weight bytes read per decoded token
  double compute_seconds = 0;   // one token: its matrices at the node's rates + its token work
  int64_t memory_bytes() const { return weight_bytes + kv_bytes; }
};

struct Plan {
  int tp = 1;
  int pp = 1;
  std::vector<RankPlan> ranks;    // tp · pp, rank = stage · tp + t
  std::vector<NodeSpec> nodes;    // the node of each rank
  std::vector<RankCost> costs;    // per rank
  std::vector<double> stage_seconds;
  ExpertSplit expert_split = ExpertSplit::None;  // None: no experts or tp 1
  // Whole experts: E[pairs on the busiest rank] / pairs per rank that the
  // cost model assumed (worst stage) at 1 token per step and at step_tokens
  // (the pipelined micro-batch); 1 otherwise.
  double expert_imbalance = 1, expert_imbalance_step = 1;
  int64_t step_tokens = 1;
  double other_split_tok_s = 0;   // automatic choice: the speed predicted for the split not taken (0: none)
  DType wire_type = DType::F32;   // all-reduce payloads and hand-offs (parallel/wire_format.h)
  int all_reduces_per_token = 0;  // per TP rank: 2 per layer of its stage
  double wire_bytes_per_token = 0;      // over all links, as the cost model sends them
  double min_wire_bytes_per_token = 0;  // 2 · n_layer · n_embd · 4 B · (tp−1) + stage hand-offs
  double single_seq_tok_s = 0;    // 1 / Σ stage times
  double pipelined_tok_s = 0;     // aggregate, with max(n_seq, pp) sequences decoded together
  int64_t pipelined_seqs = 1;     // that max(n_seq, pp)
  bool fits = true;
  std::vector<std::string> notes;  // why this layout, what does not fit

  int size() const { return tp * pp; }
  int stage_of(int rank) const { return rank / tp; }
  int tp_index(int rank) const { return rank % tp; }
  int rank_of(int stage, int t) const { return stage * tp + t; }
  std::string describe(const ModelConfig& c) const;  // the table `shardlm plan` prints
};

// The cost model's all-reduce of `values` floats over tp ranks on `link`:
// all_reduce_steps(tp) latencies (ceil(log2 tp)) + the bytes one rank sends
// in `wire` / bandwidth.
double all_reduce_seconds(int tp, size_t values, DType wire, const NodeSpec& link);
double all_reduce_steps(int tp);

// Granularity of tensor-parallel splits for this file's tensor types.
struct SplitUnits {
  int64_t heads = 1;      // query heads per unit (attn_output column blocks)
  int64_t ff = 1;         // FFN rows per unit (ffn_down column blocks of the dense layers)
  int64_t expert_ff = 1;  // expert rows per unit (ffn_down_exps column blocks)
  int64_t shared_ff = 1;  // shared-expert rows per unit (ffn_down_shexp column blocks)
};
SplitUnits split_units(const gguf::File& file, const ModelConfig& c);

// Splits [0, n_units · unit) into parts weighted by `weights`, every part at
// least one unit (largest remainders). Throws Error when n_units < parts.
std::vector<Range> weighted_split(int64_t n_units, int64_t unit, const std::vector<double>& weights,
                                  const std::string& what);

// A layout the flags ask for that no nodes could give (a shape the model
// cannot be split into, more ranks than nodes): a usage error, where a plan
// that does not fit the nodes' memory is an Error.
class PlanRequestError : public Error {
 public:
  using Error::Error;
};

// The chosen (or requested) layout. Throws PlanRequestError when the request
// is impossible (shapes, node count) and Error, without `force`, when it does
// not fit in the nodes' memory.
Plan make_plan(const gguf::File& file, const std::vector<NodeSpec>& nodes, const PlanRequest& request);

// A plan for local tests and benchmarks: tp × pp copies of `node`, no memory
// check; n_seq and n_ctx only change the predicted speed and KV sizes.
// MoE layers split by expert rows, or by whole experts with `whole_experts`.
Plan uniform_plan(const gguf::File& file, int tp, int pp, std::vector<int64_t> layers = {},
                  const NodeSpec& node = default_node("127.0.0.1"), int64_t n_seq = 1,
                  std::optional<DType> wire_type = {}, bool whole_experts = false, int64_t n_ctx = 512,
                  double balance_margin = kDefaultBalanceMargin);

}  // namespace shardlm::parallel
