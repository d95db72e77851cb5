#include "parallel/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/weights.h"
#include "parallel/expert_imbalance.h"
#include "parallel/row_balance.h"
#include "parallel/wire_format.h"

namespace shardlm::parallel {
namespace {

// Memory in a unit that shows the difference between small figures too
// (a tiny model on a node that reports a few MiB).
std::string memory_text(int64_t bytes) {
  if (bytes >= (int64_t(1) << 30)) return fmt::format("{:.2f} GiB", double(bytes) / double(1ll << 30));
  if (bytes >= (int64_t(1) << 20)) return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20));
  return fmt::format("{} bytes", bytes);
}

// Bytes one TP rank sends for one all-reduce of `values` floats: f32 as the
// ring/one-shot algorithms of comm/ move it, a compressed payload as
// parallel/wire_all_reduce.h does (its encoding to each other rank).
double all_reduce_rank_bytes(int tp, size_t values, DType wire) {
  if (tp <= 1) return 0;
  if (wire == DType::F32) return 2 * double(values) * 4 * double(tp - 1) / double(tp);
  return double(tp - 1) * double(wire_row_bytes(wire, values));
}

constexpr double kExactWireGbs = 1.0, kHalfWireGbs = 0.1;

// One forward step of `tokens` tokens through a rank's matrices: the bytes
// it reads of each (of the experts, the share the step is expected to touch)
// at the node's measured rate for its type, or at the memory bandwidth where
// nothing was measured; the routed experts apart. A column slice counts
// its own bytes: the model packs those into contiguous rows at load
// (ModelWeights::pack_column_slices).
struct MatrixSeconds {
  double fixed = 0, routed = 0;
  double total() const { return fixed + routed; }
};

MatrixSeconds matrix_seconds(const ModelWeights& w, const NodeSpec& node, int64_t tokens) {
  MatrixSeconds s;
  w.for_each_matrix(tokens, [&](const MatrixView& m, double share, bool routed) {
    const double rate = node.kernel_rates.rate(m.type, tokens);
    (routed ? s.routed : s.fixed) +=
        share * double(row_bytes(m.type, m.cols)) * double(m.rows) /
        ((rate > 0 ? rate : node.memory_bandwidth_gbs) * 1e9);
  });
  return s;
}

// FFN rows one token runs through in one of the rank's layers: its dense
// rows, or in a mixture-of-experts model the rows of the experts a token
// uses that the rank holds (whole experts: its share of them) and its shared
// rows; the MoE figure stands for the leading dense layers too.
double ff_rows_per_token(const ModelConfig& c, const RankPlan& r) {
  if (!c.has_experts()) return double(r.ff_rows.size());
  const double held = double(r.experts.size()) / double(c.moe.n_expert);
  return double(c.moe.n_expert_used) * held * double(r.expert_rows.size()) + double(r.shared_rows.size());
}

// A step's per-token work besides the matrices on one rank
// (parallel/token_costs.h): every layer's element-wise work, the store of
// its KV heads' rows and the attention of its query heads over `context`
// cached positions, for each of `tokens` tokens. Each at the node's
// measured cost; where it measured nothing, the bytes moved at its memory
// bandwidth (three floats a value: read, read, write; the rows stored; the
// cached rows attention reads).
double token_work_seconds(const ModelConfig& c, const RankPlan& r, const NodeSpec& node, int64_t tokens,
                          int64_t context, size_t kv_elem_bytes) {
  const double layers = double(r.layers.size()) * double(tokens);
  const double values = layer_vector_values(c.n_embd, r.heads.size() * c.head_dim_k, r.kv_heads.size() * c.head_dim_k,
                                            int64_t(ff_rows_per_token(c, r)));
  const double row_bytes = double(r.kv_heads.size()) * double(c.head_dim_k + c.head_dim_v) * double(kv_elem_bytes);
  const double attended = double(context) * double(c.head_dim_k + c.head_dim_v);
  const double bandwidth = node.memory_bandwidth_gbs * 1e9;
  const TokenCosts& k = node.token_costs;
  const double vector = k.vector_ns > 0 ? values * k.vector_ns * 1e-9 : values * 3 * sizeof(float) / bandwidth;
  const double store = k.kv_store_ns > 0 ? row_bytes * k.kv_store_ns * 1e-9 : row_bytes / bandwidth;
  const double attention = k.attention_ns > 0
                               ? double(r.heads.size()) * attended * k.attention_ns * 1e-9
                               : double(r.kv_heads.size()) * attended * double(kv_elem_bytes) / bandwidth;
  return layers * (vector + store + attention);
}

// The slowest link of a group of nodes decides its collectives.
NodeSpec slowest_link(const std::vector<NodeSpec>& nodes, size_t begin, size_t end) {
  NodeSpec s = nodes[begin];
  for (size_t i = begin; i < end; ++i) {
    s.link_latency_us = std::max(s.link_latency_us, nodes[i].link_latency_us);
    s.link_bandwidth_gbs = std::min(s.link_bandwidth_gbs, nodes[i].link_bandwidth_gbs);
  }
  return s;
}

std::vector<int64_t> layers_by_weight(int64_t n_layer, const std::vector<double>& stage_weights) {
  std::vector<int64_t> layers;
  for (const Range& r : weighted_split(n_layer, 1, stage_weights, "layers")) layers.push_back(r.size());
  return layers;
}

// n rows split by weight in multiples of `unit`, and of whole 16-row panel
// groups where n allows, so that the ranks' rows can be balanced
// (parallel/row_balance.h); the last part takes the rows past the last group.
std::vector<Range> row_split(int64_t n, int64_t unit, const std::vector<double>& speed, const std::string& what) {
  const int64_t aligned = std::lcm(unit, int64_t(16));
  if (n / aligned < int64_t(speed.size())) return weighted_split(n / unit, unit, speed, what);
  auto parts = weighted_split(n / aligned, aligned, speed, what);
  parts.back().end = n;
  return parts;
}

struct Builder {
  const gguf::File& file;
  const ModelConfig& c;
  SplitUnits units;
  const PlanRequest& req;

  // The layout with row-balance margins (parallel/row_balance.h) where they
  // fit, else without: the memory is worth more than the balance.
  Plan build(const std::vector<NodeSpec>& nodes, int tp, int pp, const std::vector<int64_t>& layers,
             ExpertSplit split) const {
    Plan p = build(nodes, tp, pp, layers, split, req.balance_margin);
    if (p.fits || req.balance_margin <= 0 || tp < 2) return p;
    // Without them it fits, or at least needs the least memory (what a
    // refusal quotes, and what --force runs).
    Plan lean = build(nodes, tp, pp, layers, split, 0);
    if (lean.fits)
      lean.notes.push_back(fmt::format("no row-balance margins: with --balance-margin {} it would not fit", req.balance_margin));
    return lean;
  }

  Plan build(const std::vector<NodeSpec>& nodes, int tp, int pp, const std::vector<int64_t>& layers,
             ExpertSplit split, double margin) const {
    Plan p;
    p.tp = tp;
    p.pp = pp;
    p.nodes.assign(nodes.begin(), nodes.begin() + tp * pp);
    p.expert_split = split;
    // Rows move between ranks only over links fast enough for exact
    // activations: on slower ones (a lossy wire type) a message a layer costs
    // more latency and bytes than a slower neighbour does.
    if (const DType wire = choose_wire_type(p); wire != DType::F32 && margin > 0 && tp > 1) {
      margin = 0;
      p.notes.push_back(fmt::format("no row-balance margins with {} activations (rows move only with exact f32 ones)",
                                    wire_type_name(wire)));
    }
    int64_t layer = 0;
    for (int s = 0; s < pp; ++s) {
      std::vector<double> speed;
      for (int t = 0; t < tp; ++t) speed.push_back(p.nodes[size_t(p.rank_of(s, t))].memory_bandwidth_gbs);
      const auto heads = weighted_split(c.n_head / units.heads, units.heads, speed, "attention heads");
      const auto ff = row_split(c.n_ff, units.ff, speed, "FFN rows");
      // Models with experts: their dense layers are few (deepseek2's first).
      const auto held = held_ranges(ff, c.has_experts() ? 0 : margin);
      const auto vocab = row_split(c.n_vocab, 1, speed, "vocabulary rows");
      const auto vocab_held = held_ranges(vocab, margin);
      const ExpertRanges ex = expert_ranges(p, s, speed);
      for (int t = 0; t < tp; ++t) {
        RankPlan r;
        r.layers = {layer, layer + layers[size_t(s)]};
        r.heads = heads[size_t(t)];
        const int64_t g = c.n_group();
        r.kv_heads = {r.heads.begin / g, (r.heads.end + g - 1) / g};
        r.ff_rows = ff[size_t(t)];
        r.ff_held = held[size_t(t)];
        r.vocab_rows = vocab[size_t(t)];
        r.vocab_held = vocab_held[size_t(t)];
        if (c.has_experts()) {
          r.experts = ex.experts[size_t(t)];
          r.expert_rows = ex.rows[size_t(t)];
          if (c.moe.n_shared > 0) r.shared_rows = ex.shared[size_t(t)];
        }
        p.ranks.push_back(r);
      }
      layer += layers[size_t(s)];
    }
    cost(p);
    return p;
  }

  struct ExpertRanges {
    std::vector<Range> experts, rows, shared;  // per rank of a stage
  };

  // The MoE slices of stage s's ranks: whole experts by node memory, or each
  // expert's rows by node speed; shared experts always by rows, as a dense FFN.
  ExpertRanges expert_ranges(const Plan& p, int s, const std::vector<double>& speed) const {
    ExpertRanges ex;
    if (!c.has_experts()) return ex;
    const auto& m = c.moe;
    const size_t tp = speed.size();
    if (p.expert_split == ExpertSplit::Experts) {
      std::vector<double> memory;
      for (int t = 0; t < p.tp; ++t) memory.push_back(double(p.nodes[size_t(p.rank_of(s, t))].memory_bytes));
      ex.experts = weighted_split(m.n_expert, 1, memory, "experts");
      ex.rows.assign(tp, Range{0, m.n_ff_expert});
    } else {
      ex.experts.assign(tp, Range{0, m.n_expert});
      ex.rows = weighted_split(m.n_ff_expert / units.expert_ff, units.expert_ff, speed, "expert FFN rows");
    }
    const int64_t shared_units = m.n_shared * m.n_ff_expert / units.shared_ff;
    if (shared_units >= int64_t(tp)) {
      ex.shared = weighted_split(shared_units, units.shared_ff, speed, "shared-expert rows");
    } else if (m.n_shared > 0) {
      // Fewer quant blocks than ranks: the first rank runs the shared experts
      // whole, the others hold none (their part of the sum is zero).
      ex.shared.assign(tp, Range{0, 0});
      ex.shared[0] = {0, m.n_shared * m.n_ff_expert};
    }
    return ex;
  }

  // The MoE splits a tensor-parallel group of tp ranks may use: the
  // requested one, else those the shapes allow (whole experts first: they
  // win ties), else rows, for why_not_tp to name what is wrong.
  std::vector<ExpertSplit> expert_splits(int tp) const {
    if (!c.has_experts() || tp <= 1) return {ExpertSplit::None};
    if (req.ep > 0) return {ExpertSplit::Experts};
    if (req.tp > 0) return {ExpertSplit::Rows};
    std::vector<ExpertSplit> v;
    for (ExpertSplit s : {ExpertSplit::Experts, ExpertSplit::Rows})
      if (why_not_experts(tp, s).empty()) v.push_back(s);
    if (v.empty()) v.push_back(ExpertSplit::Rows);
    return v;
  }

  // Stage s's expected routing imbalance at `tokens` tokens per step (1: not whole experts).
  double expert_imbalance(const Plan& p, int s, int64_t tokens) const {
    if (p.expert_split != ExpertSplit::Experts) return 1;
    std::vector<int64_t> held;
    for (int t = 0; t < p.tp; ++t) held.push_back(p.ranks[size_t(p.rank_of(s, t))].experts.size());
    return expected_busiest_share(c.moe.n_expert, c.moe.n_expert_used, held, tokens);
  }

  std::string why_not_experts(int tp, ExpertSplit split) const {
    const auto& m = c.moe;
    if (split == ExpertSplit::Experts && m.n_expert < tp)
      return fmt::format("{} experts cannot give each of {} ranks a whole expert", m.n_expert, tp);
    if (split == ExpertSplit::Rows && m.n_ff_expert / units.expert_ff < tp)
      return fmt::format("{} rows per expert split in units of {} (ffn_down_exps blocks) give fewer than {} parts",
                         m.n_ff_expert, units.expert_ff, tp);
    return "";
  }

  // Sequences the pipelined speed is predicted for: the request's, at least pp
  // (fewer leave stages idle; single_seq_tok_s covers one).
  int64_t pipelined_seqs(int pp) const { return std::max<int64_t>(req.n_seq, pp); }
  // Tokens of one micro-batch: a step's sequences split into pp micro-batches
  // along sequences (as DistributedSession schedules them).
  int64_t micro_tokens(int pp) const { return (pipelined_seqs(pp) + pp - 1) / pp; }

  // Cached positions a decode step attends on average: a generation that
  // fills its n_ctx positions attends half of them.
  int64_t mean_context() const { return std::max<int64_t>(1, req.n_ctx / 2); }

  // Stage s's time for one step of `tokens` tokens: its slowest rank's
  // matrices and other per-token work (whole experts: the rest on the
  // slowest rank, the routed experts as the mean rank's × the expected
  // imbalance), its all-reduces and the hand-off to the next stage.
  double stage_time(const Plan& p, const std::vector<ModelWeights>& w, int s, int64_t tokens, double imbalance) const {
    const size_t b = size_t(p.rank_of(s, 0)), e = b + size_t(p.tp);
    const NodeSpec link = slowest_link(p.nodes, b, e);
    double t = 0, fixed = 0, routed = 0;
    for (size_t r = b; r < e; ++r) {
      const MatrixSeconds m = matrix_seconds(w[r], p.nodes[r], tokens);
      const double other =
          token_work_seconds(c, p.ranks[r], p.nodes[r], tokens, mean_context(), dtype_traits_bytes(req.kv_type));
      t = std::max(t, m.total() + other);
      fixed = std::max(fixed, m.fixed + other);
      routed += m.routed / double(p.tp);
    }
    if (p.expert_split == ExpertSplit::Experts) t = fixed + imbalance * routed;
    const auto values = size_t(c.n_embd * tokens);
    t += 2 * double(p.ranks[b].layers.size()) * all_reduce_seconds(p.tp, values, p.wire_type, link);
    if (s + 1 < p.pp) {
      const NodeSpec hop = slowest_link(p.nodes, b, e + size_t(p.tp));
      t += hop.link_latency_us * 1e-6 +
           double(tokens) * double(wire_row_bytes(p.wire_type, size_t(c.n_embd))) / (hop.link_bandwidth_gbs * 1e9);
    }
    return t;
  }

  // The requested wire type, else by the slowest link that carries
  // activations: exact f32 on shm, loopback and ≥ 10 GbE-class links; bf16
  // (f32's range, half the bytes) down to 1 GbE; q8_0 below, except for a
  // model with experts: its 8-bit sums can change which experts the router
  // picks (the synthetic DeepSeek-V2 parts from one node at its second
  // token, tests/parallel/distributed_test.cpp), so it stays at bf16.
  DType choose_wire_type(const Plan& p) const {
    if (req.wire_type) return *req.wire_type;
    if (p.size() == 1) return DType::F32;
    const double gbs = slowest_link(p.nodes, 0, p.nodes.size()).link_bandwidth_gbs;
    if (gbs >= kExactWireGbs) return DType::F32;
    return gbs >= kHalfWireGbs || c.has_experts() ? DType::BF16 : DType::Q8_0;
  }

  void cost(Plan& p) const {
    const size_t kv_elem = dtype_traits_bytes(req.kv_type);
    const auto& embd = file.require_tensor("token_embd.weight");
    std::vector<ModelWeights> w;
    for (int r = 0; r < p.size(); ++r) {
      const RankPlan& rp = p.ranks[size_t(r)];
      w.push_back(ModelWeights::map(file, c, rp));  // also checks block alignment
      RankCost k;
      k.bytes_per_token = int64_t(w.back().matrix_bytes_per_token());
      k.weight_bytes = int64_t(w.back().matrix_bytes_resident()) + (rp.first_stage() ? int64_t(embd.n_bytes) : 0);
      // Latent attention caches one row per token (latent + RoPE key), its values inside the keys.
      const int64_t kv_row = c.head_dim_k + (c.latent_attention() ? 0 : c.head_dim_v);
      k.kv_bytes = rp.layers.size() * req.n_seq * req.n_ctx * rp.kv_heads.size() * kv_row * int64_t(kv_elem);
      k.compute_seconds = matrix_seconds(w.back(), p.nodes[size_t(r)], 1).total() +
                          token_work_seconds(c, rp, p.nodes[size_t(r)], 1, mean_context(), kv_elem);
      p.costs.push_back(k);
    }
    p.wire_type = choose_wire_type(p);
    const double row = double(wire_row_bytes(p.wire_type, size_t(c.n_embd)));
    p.stage_seconds.clear();
    p.wire_bytes_per_token = 0;
    double sum = 0, worst = 0, micro_sum = 0;
    const int64_t micro = micro_tokens(p.pp);
    p.step_tokens = micro;
    p.pipelined_seqs = pipelined_seqs(p.pp);
    p.expert_imbalance = p.expert_imbalance_step = 1;
    for (int s = 0; s < p.pp; ++s) {
      const double single = expert_imbalance(p, s, 1), step = micro == 1 ? single : expert_imbalance(p, s, micro);
      p.expert_imbalance = std::max(p.expert_imbalance, single);
      p.expert_imbalance_step = std::max(p.expert_imbalance_step, step);
      const double t = stage_time(p, w, s, 1, single);
      p.stage_seconds.push_back(t);
      sum += t;
      const double micro_t = stage_time(p, w, s, micro, step);
      worst = std::max(worst, micro_t);
      micro_sum += micro_t;
      const double n_layers = double(p.ranks[size_t(p.rank_of(s, 0))].layers.size());
      p.wire_bytes_per_token += 2 * n_layers * double(p.tp) * all_reduce_rank_bytes(p.tp, size_t(c.n_embd), p.wire_type);
      if (s + 1 < p.pp) p.wire_bytes_per_token += row * p.tp;
    }
    p.all_reduces_per_token = p.tp > 1 ? int(2 * p.ranks[0].layers.size()) : 0;
    p.min_wire_bytes_per_token = 2 * double(c.n_layer) * row * double(p.tp - 1) + double(p.pp - 1) * row;
    p.single_seq_tok_s = 1 / sum;
    // Stages do not overlap across step boundaries: the first micro-batch
    // passes every stage, each further one adds the slowest stage's time.
    p.pipelined_tok_s = double(pipelined_seqs(p.pp)) / (micro_sum + double(p.pp - 1) * worst);
    p.fits = true;
    for (int r = 0; r < p.size(); ++r) {
      if (p.costs[size_t(r)].memory_bytes() > p.nodes[size_t(r)].memory_bytes) {
        p.fits = false;
        p.notes.push_back(fmt::format("rank {} ({}) needs {} but has {}", r, p.nodes[size_t(r)].name,
                                      memory_text(p.costs[size_t(r)].memory_bytes()),
                                      memory_text(p.nodes[size_t(r)].memory_bytes)));
      }
    }
  }

  static size_t dtype_traits_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

  // Layers per stage: given, else by stage bandwidth, falling back to memory
  // when the bandwidth split does not fit.
  Plan build_stages(const std::vector<NodeSpec>& nodes, int tp, int pp, ExpertSplit split) const {
    if (!req.layers.empty()) return build(nodes, tp, pp, req.layers, split);
    std::vector<double> bw(size_t(pp), 0), mem(size_t(pp), 0);
    for (int r = 0; r < tp * pp; ++r) {
      bw[size_t(r / tp)] += nodes[size_t(r)].memory_bandwidth_gbs;
      mem[size_t(r / tp)] += double(nodes[size_t(r)].memory_bytes);
    }
    Plan p = build(nodes, tp, pp, layers_by_weight(c.n_layer, bw), split);
    if (p.fits || pp == 1) return p;
    Plan by_memory = build(nodes, tp, pp, layers_by_weight(c.n_layer, mem), split);
    if (by_memory.fits) by_memory.notes.push_back("layers split by node memory: the split by bandwidth did not fit");
    return by_memory.fits ? by_memory : p;
  }

  // The speed a plan is chosen by: one sequence's, or with several the
  // pipelined micro-batches'.
  double chosen_speed(const Plan& p) const { return req.n_seq > 1 ? p.pipelined_tok_s : p.single_seq_tok_s; }

  // Of the MoE splits allowed, the plan that fits (unless forced) and
  // predicts the most tok/s; the first on a tie.
  Plan build_stages(const std::vector<NodeSpec>& nodes, int tp, int pp) const {
    std::optional<Plan> best;
    double other = 0;
    for (ExpertSplit split : expert_splits(tp)) {
      Plan p = build_stages(nodes, tp, pp, split);
      if (!best) {
        best = std::move(p);
        continue;
      }
      const bool fits = p.fits || req.force, best_fits = best->fits || req.force;
      if ((fits && !best_fits) || (fits == best_fits && chosen_speed(p) > chosen_speed(*best))) {
        other = chosen_speed(*best);
        best = std::move(p);
      } else {
        other = chosen_speed(p);
      }
    }
    best->other_split_tok_s = other;
    return std::move(*best);
  }

  std::string why_not_tp(int tp) const {
    if (c.has_experts() && tp > 1)
      if (std::string why = why_not_experts(tp, expert_splits(tp).front()); !why.empty()) return why;
    if (c.n_head / units.heads < tp)
      return fmt::format("{} attention heads split in units of {} (attn_output blocks) give fewer than {} parts",
                         c.n_head, units.heads, tp);
    if (!c.has_experts() || c.moe.n_leading_dense > 0) {
      if (c.n_ff / units.ff < tp)
        return fmt::format("{} FFN rows split in units of {} (ffn_down blocks) give fewer than {} parts", c.n_ff,
                           units.ff, tp);
    } else if (c.n_ff < tp) {
      return fmt::format("feed_forward_length {} is less than {}", c.n_ff, tp);
    }
    return "";
  }
};

}  // namespace

double all_reduce_seconds(int tp, size_t values, DType wire, const NodeSpec& link) {
  if (tp <= 1) return 0;
  return link.link_latency_us * 1e-6 * all_reduce_steps(tp) +
         all_reduce_rank_bytes(tp, values, wire) / (link.link_bandwidth_gbs * 1e9);
}

double all_reduce_steps(int tp) { return tp <= 1 ? 0 : std::ceil(std::log2(double(tp))); }

std::vector<Range> weighted_split(int64_t n_units, int64_t unit, const std::vector<double>& weights,
                                  const std::string& what) {
  const size_t n = weights.size();
  if (n == 0 || int64_t(n) > n_units)
    throw Error(fmt::format("cannot split {} {} into {} parts", n_units * unit, what, n));
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  // Every part gets one unit; the rest goes by weight, largest remainders first.
  std::vector<int64_t> count(n, 1);
  std::vector<std::pair<double, size_t>> rem;
  int64_t left = n_units - int64_t(n);
  const int64_t spare = left;
  for (size_t i = 0; i < n; ++i) {
    const double share = double(spare) * weights[i] / total;
    const auto whole = int64_t(std::floor(share));
    count[i] += whole;
    left -= whole;
    rem.push_back({share - double(whole), i});
  }
  std::stable_sort(rem.begin(), rem.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; left > 0; ++i, --left) ++count[rem[i % n].second];
  std::vector<Range> out;
  int64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    out.push_back({at * unit, (at + count[i]) * unit});
    at += count[i];
  }
  return out;
}

SplitUnits split_units(const gguf::File& file, const ModelConfig& c) {
  SplitUnits u;
  const int64_t v_head = c.latent_attention() ? c.attention.latent.v_dim : c.head_dim_v;
  auto blocks = [&](int64_t l, const char* name) {
    return traits(file.require_tensor(fmt::format("blk.{}.{}", l, name)).type).block_elems;
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const int64_t b = blocks(l, "attn_output.weight");
    u.heads = std::lcm(u.heads, b / std::gcd(b, v_head));
    if (!c.layer_has_experts(l)) {
      u.ff = std::lcm(u.ff, blocks(l, "ffn_down.weight"));
      continue;
    }
    u.expert_ff = std::lcm(u.expert_ff, blocks(l, "ffn_down_exps.weight"));
    if (c.moe.n_shared > 0) u.shared_ff = std::lcm(u.shared_ff, blocks(l, "ffn_down_shexp.weight"));
  }
  return u;
}

namespace {

// The stages --pp and --layers ask for (0: left to the planner), checked
// against each other and the model.
int requested_stages(const PlanRequest& req, const ModelConfig& c) {
  if (req.layers.empty()) return req.pp;
  if (req.pp != 0 && size_t(req.pp) != req.layers.size())
    throw PlanRequestError(fmt::format("plan: --layers gives {} stages but --pp is {}", req.layers.size(), req.pp));
  int64_t sum = 0;
  for (int64_t l : req.layers) {
    if (l < 1) throw PlanRequestError("plan: --layers: every stage needs at least one layer");
    sum += l;
  }
  if (sum != c.n_layer)
    throw PlanRequestError(fmt::format("plan: --layers add up to {} but the model has {} layers", sum, c.n_layer));
  return int(req.layers.size());
}

// What each rank holds of the experts, and the split not taken.
void add_expert_notes(Plan& p, double chosen_tok_s, int64_t n_seq) {
  const bool whole = p.expert_split == ExpertSplit::Experts;
  std::string held;
  for (int r = 0; r < p.size(); ++r) {
    const Range e = whole ? p.ranks[size_t(r)].experts : p.ranks[size_t(r)].expert_rows;
    held += fmt::format("{} {}: [{}, {})", r == 0 ? "" : ",", r, e.begin, e.end);
  }
  p.notes.push_back(fmt::format("experts: {}; rank{}",
                                whole ? "whole experts per rank (expert parallel), by node memory"
                                      : "every expert's FFN rows split over the tensor-parallel ranks",
                                held));
  if (p.other_split_tok_s > 0)
    p.notes.push_back(fmt::format("experts: {} chosen over {}: {:.1f} against {:.1f} tok/s predicted at {} "
                                  "sequence(s)",
                                  whole ? "whole experts" : "rows", whole ? "rows" : "whole experts", chosen_tok_s,
                                  p.other_split_tok_s, n_seq));
}

}  // namespace

Plan make_plan(const gguf::File& file, const std::vector<NodeSpec>& nodes, const PlanRequest& req) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  const int n = int(nodes.size());
  if (n < 1) throw Error("plan: no nodes");
  if (req.tp < 0 || req.pp < 0 || req.ep < 0) throw PlanRequestError("plan: --tp, --ep and --pp must be positive");
  if (req.ep > 0 && req.tp > 0)
    throw PlanRequestError("plan: give --tp (experts split by rows) or --ep (whole experts), not both");
  if (req.ep > 0 && !c.has_experts())
    throw PlanRequestError(fmt::format("plan: --ep {}: this {} model has no experts (use --tp)", req.ep, c.arch_name));
  if (req.n_ctx < 1 || req.n_seq < 1) throw PlanRequestError("plan: --ctx and the sequence count must be positive");
  const int pp_req = requested_stages(req, c);
  const Builder b{file, c, split_units(file, c), req};
  auto check_shape = [&](int tp, int pp) {
    if (pp > c.n_layer) throw PlanRequestError(fmt::format("plan: {} stages for a model of {} layers", pp, c.n_layer));
    if (tp * pp > n) throw PlanRequestError(fmt::format("plan: tp {} × pp {} needs {} nodes, {} given", tp, pp, tp * pp, n));
    if (const std::string why = b.why_not_tp(tp); !why.empty())
      throw PlanRequestError(fmt::format("plan: cannot use {} {}: {}", req.ep > 0 ? "ep" : "tp", tp, why));
  };
  auto finish = [&](Plan p, const std::string& why) {
    if (!p.fits && !req.force)
      throw Error(fmt::format("plan: tp {} × pp {} does not fit: {} (--force skips this check)", p.tp, p.pp,
                              p.notes.back()));
    p.notes.insert(p.notes.begin(), why);
    if (p.expert_split != ExpertSplit::None) add_expert_notes(p, b.chosen_speed(p), req.n_seq);
    if (p.size() < n) p.notes.push_back(fmt::format("{} node(s) unused", n - p.size()));
    if (!p.fits) p.notes.push_back("--force: the memory check was skipped");
    return p;
  };

  const int tp_req = std::max(req.tp, req.ep);
  if (tp_req > 0 || pp_req > 0) {
    const int tp = tp_req > 0 ? tp_req : std::max(1, n / pp_req);
    const int pp = pp_req > 0 ? pp_req : std::max(1, n / tp);
    check_shape(tp, pp);
    return finish(b.build_stages(nodes, tp, pp),
                  fmt::format("layout as requested: {} {} × pp {}", req.ep > 0 ? "ep" : "tp", tp, pp));
  }
  // Automatic: the fewest stages that fit; inside them, as much tensor
  // parallelism as the predicted time rewards (a slow link makes TP lose).
  for (int pp = 1; pp <= std::min<int64_t>(n, c.n_layer); ++pp) {
    Plan best;
    bool found = false;
    std::string tried;
    for (int tp = 1; tp * pp <= n; ++tp) {
      if (!b.why_not_tp(tp).empty()) continue;
      Plan p = b.build_stages(nodes, tp, pp);
      tried += fmt::format(" tp{}={:.1f}", tp, p.single_seq_tok_s);
      if ((p.fits || req.force) && (!found || p.single_seq_tok_s > best.single_seq_tok_s)) {
        best = std::move(p);
        found = true;
      }
    }
    if (found)
      return finish(std::move(best),
                    fmt::format("auto: pp {} is the fewest stages that fit; tp {} predicts the most tok/s (tried{})",
                                pp, best.tp, tried));
  }
  Plan all = b.build_stages(nodes, 1, int(std::min<int64_t>(n, c.n_layer)));
  throw Error(fmt::format("plan: no layout of {} node(s) fits the model: {}", n,
                          all.notes.empty() ? "shapes do not allow a split" : all.notes.back()));
}

Plan uniform_plan(const gguf::File& file, int tp, int pp, std::vector<int64_t> layers, const NodeSpec& node,
                  int64_t n_seq, std::optional<DType> wire_type, bool whole_experts, int64_t n_ctx,
                  double balance_margin) {
  std::vector<NodeSpec> nodes(size_t(tp * pp), node);
  for (int i = 0; i < tp * pp; ++i) nodes[size_t(i)].name = fmt::format("rank{}", i);
  PlanRequest req;
  (whole_experts ? req.ep : req.tp) = tp;
  req.pp = pp;
  req.n_seq = n_seq;
  req.layers = std::move(layers);
  req.force = true;
  req.n_ctx = n_ctx;
  req.wire_type = wire_type;
  req.balance_margin = balance_margin;
  return make_plan(file, nodes, req);
}

}  // namespace shardlm::parallel
