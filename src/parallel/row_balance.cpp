#include "parallel/row_balance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace shardlm::parallel {
namespace {

// Rows of a panel group (core/matmul.h's Panels16): a held matrix is cut into
// row views at the boundaries, which must start whole groups.
constexpr int64_t kGroupRows = 16;

int64_t whole_steps(double rows) { return int64_t(std::floor(rows / double(kBalanceStepRows))) * kBalanceStepRows; }

}  // namespace

std::vector<Range> held_ranges(std::span<const Range> owned, double margin) {
  std::vector<Range> held(owned.begin(), owned.end());
  if (owned.size() < 2 || margin <= 0) return held;
  for (size_t i = 1; i < owned.size(); ++i)
    if (owned[i].begin % kGroupRows != 0) return held;
  margin = std::min(margin, 0.5);  // two neighbours' margins never meet
  for (size_t i = 1; i < owned.size(); ++i) {
    held[i - 1].end += whole_steps(margin * double(owned[i].size()));
    held[i].begin -= whole_steps(margin * double(owned[i - 1].size()));
  }
  return held;
}

RowBalancer::RowBalancer(std::vector<Range> owned, std::vector<Range> held, const std::string& what)
    : owned_(std::move(owned)), held_(std::move(held)) {
  const size_t n = owned_.size();
  if (n == 0 || held_.size() != n) throw Error(fmt::format("row balance: one owned and one held range of {} rows per rank needed", what));
  for (size_t i = 0; i < n; ++i) {
    const Range o = owned_[i], h = held_[i];
    const auto bad = [&](const char* why) {
      return Error(fmt::format("row balance: rank {} holds {} rows [{}, {}) for its rows [{}, {}): {}", i, what, h.begin,
                               h.end, o.begin, o.end, why));
    };
    if (o.size() <= 0 || h.begin > o.begin || h.end < o.end) throw bad("they do not cover its own");
    if (i > 0 && owned_[i - 1].end != o.begin) throw bad("the ranks' rows are not consecutive");
    if ((i == 0 && h.begin != o.begin) || (i + 1 == n && h.end != o.end)) throw bad("no neighbour owns the margin");
    if ((o.begin - h.begin) % kBalanceStepRows != 0 || (h.end - o.end) % kBalanceStepRows != 0)
      throw bad("the margins are not whole steps");
    if ((h.begin != o.begin && o.begin % kGroupRows != 0) || (h.end != o.end && o.end % kGroupRows != 0))
      throw bad("a boundary with a margin is not a multiple of 16 rows");
    // The margins into rank i's rows from both sides may not meet.
    if (i > 0 && i + 1 < n && held_[i - 1].end > held_[i + 1].begin) throw bad("its neighbours' margins overlap");
  }
  bounds_.push_back(owned_.front().begin);
  for (const Range& o : owned_) bounds_.push_back(o.end);
}

int64_t RowBalancer::clamp_boundary(size_t i, double want) const {
  const int64_t o = owned_[i].begin, lo = held_[i].begin, hi = held_[i - 1].end;
  const int64_t steps = int64_t(std::llround((want - double(o)) / double(kBalanceStepRows)));
  return std::clamp(o + steps * kBalanceStepRows, lo, hi);
}

int64_t RowBalancer::balanced_boundary(size_t i, double want) const {
  const int64_t b = clamp_boundary(i, want);
  // Fewer rows save less than the messages cost: on loopback TCP a message
  // a layer costs ~20 us of the two ranks' time, what a 1B model's rank
  // needs for ~150 gate/up rows (a FFN ~5 % out of balance).
  return std::abs(b - owned_[i].begin) < kMinShipSteps * kBalanceStepRows ? owned_[i].begin : b;
}

void RowBalancer::shift_all(int64_t rows) {
  for (size_t i = 1; i + 1 < bounds_.size(); ++i) bounds_[i] = clamp_boundary(i, double(owned_[i].begin + rows));
}

bool RowBalancer::shipping() const {
  for (size_t i = 1; i + 1 < bounds_.size(); ++i)
    if (bounds_[i] != owned_[i].begin) return true;
  return false;
}

void RowBalancer::observe(std::span<const BalanceWindow> windows) {
  const size_t n = owned_.size();
  if (windows.size() != n || n < 2) return;
  const double row_bytes = windows[0].row_bytes;
  if (!(row_bytes > 0)) return;
  std::vector<double> rate(n);  // seconds per byte this window
  for (size_t i = 0; i < n; ++i) {
    const BalanceWindow& w = windows[i];
    const double bytes = w.forwards * (w.fixed_bytes + double(computed(int(i)).size()) * row_bytes);
    // From the network: anything not a plain positive number leaves the boundaries alone.
    if (!(w.compute_seconds > 0) || !(bytes > 0) || !std::isfinite(w.compute_seconds) || !std::isfinite(bytes) ||
        !(w.fixed_bytes >= 0) || !std::isfinite(w.row_bytes))
      return;
    rate[i] = w.compute_seconds / bytes;
  }
  if (seconds_per_byte_.empty()) seconds_per_byte_ = rate;
  for (size_t i = 0; i < n; ++i) seconds_per_byte_[i] = 0.5 * (seconds_per_byte_[i] + rate[i]);
  // Equal time T on every rank: rate_i (F_i + g_i β) = T with Σ g_i the stage's rows.
  double fixed = 0, speed = 0;
  for (size_t i = 0; i < n; ++i) {
    fixed += windows[i].fixed_bytes;
    speed += 1 / seconds_per_byte_[i];
  }
  const double rows = double(bounds_.back() - bounds_.front());
  const double t = (fixed + rows * row_bytes) / speed;
  double want = double(bounds_.front());
  for (size_t i = 1; i < n; ++i) {
    want += (t / seconds_per_byte_[i - 1] - windows[i - 1].fixed_bytes) / row_bytes;
    if (!std::isfinite(want)) return;
    // Kept unless the move is most of a step: timing noise does not flip it.
    if (std::abs(want - double(bounds_[i])) >= 0.75 * double(kBalanceStepRows)) bounds_[i] = balanced_boundary(i, want);
  }
}

}  // namespace shardlm::parallel
