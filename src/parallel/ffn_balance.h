// Tensor parallel on cores of uneven speed: exact work moves from a slow
// rank to a fast one, inside each dense FFN.
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
// made, so results are bit-identical for any boundaries b_i.
//
// The boundaries follow the measured speeds: every kWindow forwards of at
// most kMaxTokens tokens the ranks of a stage exchange the time their FFNs
// took (from the attention's all-reduce to the FFN's, waits for rows
// excluded), and every rank derives the same new boundaries from the same
// numbers: per rank a time per byte of FFN weights, smoothed, then the
// boundaries that give every rank's FFN the same time, in steps of
// kFfnStepRows, within the margins, kept unless they move by most of a step,
// and none moved by less than kMinShipSteps.
// The FFN alone is balanced, not the whole step: a step lasts the sum over
// its all-reduce segments of the slowest rank's, and the attention between
// them cannot move.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/plan.h"

namespace shardlm::parallel {

// Rows a boundary moves by, a multiple of the panel groups (core/matmul.h)
// and of the kernels' row alignment, so each row's tiling stays the same.
inline constexpr int64_t kFfnStepRows = 64;
// The margin of a neighbour's rows a rank holds, as a share of that
// neighbour's rows (memory: a quarter more of the gate/up rows).
inline constexpr double kDefaultFfnMargin = 0.25;

// The held ranges of a stage's ranks, whose own rows are `owned` (in rank
// order, consecutive): each extends into its neighbours' rows by `margin` of
// theirs, in whole steps. No margin where a boundary is not a multiple of 16
// rows or the margin is under one step.
std::vector<Range> ffn_held_ranges(std::span<const Range> owned, double margin);

// What one rank measured over a window (exchanged as is).
struct FfnWindow {
  double compute_seconds = 0;  // in the dense FFNs of its forwards, waits for rows excluded
  double forwards = 0;
  double fixed_bytes = 0;      // ffn_down bytes a forward reads on this rank
  double row_bytes = 0;        // bytes of one gate/up row over all the stage's dense layers
};

class FfnBalancer {
 public:
  // Throws Error when the ranges do not fit together (a plan from the network).
  FfnBalancer(std::vector<Range> owned, std::vector<Range> held);

  static constexpr int kWindow = 8;
  static constexpr int64_t kMinShipSteps = 2;
  static constexpr int64_t kMaxTokens = 16;

  // The rows rank i computes.
  Range computed(int i) const { return {bounds_[size_t(i)], bounds_[size_t(i) + 1]}; }
  // Every boundary moved by `rows` towards the rank after (negative: before),
  // within the margins, in whole steps (tests and benchmarks).
  void shift_all(int64_t rows);
  // New boundaries from every rank's window (rank order).
  void observe(std::span<const FfnWindow> windows);
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
