// Tensor parallel on cores of uneven speed: exact work moves from a slow
// rank to a fast one, in the column-parallel products whose outputs the
// rank itself consumes: each dense FFN's gate/up, and the output matrix.
//
// The ranks of a stage own consecutive rows of ffn_gate/ffn_up ([o_i, o_i+1)
// for rank i) and the same columns of ffn_down, whose partial products the
// all-reduce sums. The down projections cannot move without changing that
// sum, but gate/up rows can: each value is a dot product of one weight row
// with the replicated input. So every rank also holds a margin of its
// neighbours' gate/up rows (RankPlan::ff_held), the rows each rank computes
// ([b_i, b_i+1)) may leave its own, and the activated values a rank computes
// for its neighbour are sent to it before that neighbour's down projection
// needs them. Every product and every sum is the one the owner would have
// made, so results are bit-identical for any boundaries b_i. The output's
// rows (each rank's slice of the logits, sampled where they are) move the
// same way (RankPlan::vocab_held).
//
// The boundaries follow the measured speeds: every kWindow forwards of at
// most kMaxTokens tokens the ranks of a stage exchange the time each kind
// took (the FFNs: from the attention's all-reduce to the FFN's; the output:
// from the last all-reduce to the logits; waits for rows excluded), and
// every rank derives the same new boundaries from the same numbers: per
// rank a time per byte of those weights, smoothed, then the boundaries that
// give every rank the same time, in steps of kBalanceStepRows, within the
// margins, kept unless they move by most of a step, and none moved by less
// than kMinShipSteps. Those segments alone are balanced, not the whole
// step: a step lasts the sum over its all-reduce segments of the slowest
// rank's, and the attention between them cannot move.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/plan.h"

namespace shardlm::parallel {

// Rows a boundary moves by, a multiple of the panel groups (core/matmul.h)
// and of the kernels' row alignment, so each row's tiling stays the same.
inline constexpr int64_t kBalanceStepRows = 64;
// The margin of a neighbour's rows a rank holds, as a share of that
// neighbour's rows (memory: a quarter more of the gate/up and output rows).
inline constexpr double kDefaultBalanceMargin = 0.25;

// The held ranges of a stage's ranks, whose own rows are `owned` (in rank
// order, consecutive): each extends into its neighbours' rows by `margin` of
// theirs, in whole steps. No margin where a boundary is not a multiple of 16
// rows or the margin is under one step.
std::vector<Range> held_ranges(std::span<const Range> owned, double margin);

// What one rank measured over a window, of one kind (exchanged as is).
struct BalanceWindow {
  double compute_seconds = 0;  // in its segments of its forwards, waits for rows excluded
  double forwards = 0;
  double fixed_bytes = 0;      // other weight bytes a forward reads there (ffn_down; none for the output)
  double row_bytes = 0;        // bytes of one movable row (gate and up over all the stage's dense layers)
};

class RowBalancer {
 public:
  // Throws Error naming `what` (e.g. "FFN") when the ranges do not fit
  // together (a plan from the network).
  RowBalancer(std::vector<Range> owned, std::vector<Range> held, const std::string& what);

  static constexpr int kWindow = 8;
  static constexpr int64_t kMinShipSteps = 3;
  static constexpr int64_t kMaxTokens = 16;

  // The rows rank i computes.
  Range computed(int i) const { return {bounds_[size_t(i)], bounds_[size_t(i) + 1]}; }
  // Every boundary moved by `rows` towards the rank after (negative: before),
  // within the margins, in whole steps (tests and benchmarks).
  void shift_all(int64_t rows);
  // New boundaries from every rank's window (rank order).
  void observe(std::span<const BalanceWindow> windows);
  // Whether any rank computes rows it does not own.
  bool shipping() const;

 private:
  int64_t clamp_boundary(size_t i, double want) const;
  int64_t balanced_boundary(size_t i, double want) const;

  std::vector<Range> owned_, held_;
  std::vector<int64_t> bounds_;         // b_0 .. b_n: rank i computes [b_i, b_i+1)
  std::vector<double> seconds_per_byte_;  // smoothed; empty before the first window
};

}  // namespace shardlm::parallel
