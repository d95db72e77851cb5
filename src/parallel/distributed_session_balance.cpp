// The rows of column-parallel products a tensor-parallel rank computes for
// its neighbours (parallel/row_balance.h): the forward pass's hooks, and the
// window of timings after which the ranks of a stage agree on new
// boundaries.
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "core/matmul.h"
#include "model/config.h"
#include "parallel/distributed_session.h"

namespace shardlm::parallel {
namespace {

// On the stage's communicator; one tag a kind keeps an FFN's rows from ever
// meeting the output's.
constexpr uint32_t kTagRows[2] = {4, 5};
constexpr const char* kRowsName[2] = {"FFN", "output"};

size_t kind(SharedRows what) { return what == SharedRows::Ffn ? 0 : 1; }

// A rank's own rows of a kind, and the rows it holds.
std::pair<Range, Range> rows_of(const RankPlan& r, size_t kind) {
  return kind == 0 ? std::pair{r.ff_rows, r.ff_held} : std::pair{r.vocab_rows, r.vocab_held};
}

}  // namespace

// The stage's ranks must agree on who holds which rows before any of them
// waits for rows from another: a plan altered for one rank (the plan comes
// over the network) would otherwise leave it waiting for rows never sent.
void DistributedSession::check_stage_rows_agree(const ModelConfig& c) {
  std::vector<int64_t> mine;
  for (int i = 0; i < plan_.tp; ++i) {
    const RankPlan& r = plan_.ranks[size_t(plan_.rank_of(stage_index_, i))];
    r.validate(c);
    for (const Range x : {r.ff_rows, r.ff_held, r.vocab_rows, r.vocab_held}) {
      mine.push_back(x.begin);
      mine.push_back(x.end);
    }
  }
  std::vector<int64_t> all(mine.size() * size_t(plan_.tp));
  stage_->all_gather(mine.data(), all.data(), mine.size() * sizeof(int64_t));
  for (int i = 0; i < plan_.tp; ++i)
    if (!std::equal(mine.begin(), mine.end(), all.begin() + ptrdiff_t(size_t(i) * mine.size())))
      throw Error(fmt::format("distributed session: rank {} was given other FFN or output rows for this stage's ranks "
                              "than rank {} (their plans differ)",
                              plan_.rank_of(stage_index_, i), rank_));
}

void DistributedSession::install_row_hooks(ModelOptions& mo, const ModelConfig& c) {
  if (plan_.tp < 2) return;
  check_stage_rows_agree(c);
  const bool last_stage = stage_index_ == plan_.pp - 1;
  for (size_t k = 0; k < 2; ++k) {
    if (k == 1 && !last_stage) continue;
    std::vector<Range> owned, held;
    bool margins = false;
    for (int i = 0; i < plan_.tp; ++i) {
      const auto [own, holds] = rows_of(plan_.ranks[size_t(plan_.rank_of(stage_index_, i))], k);
      owned.push_back(own);
      held.push_back(holds);
      margins |= holds != own;
    }
    if (!margins) continue;
    balance_[k].balancer = std::make_unique<RowBalancer>(std::move(owned), std::move(held), kRowsName[k]);
    if (opt_.balance_shift) balance_[k].balancer->shift_all(*opt_.balance_shift);
  }
  if (!balance_[0].balancer && !balance_[1].balancer) return;
  mo.hooks.rows = [this](SharedRows what, int64_t n_tokens) {
    const Range own = rows_of(plan_.ranks[size_t(rank_)], kind(what)).first;
    const RowBalancer* b = balance_[kind(what)].balancer.get();
    if (!b || n_tokens > RowBalancer::kMaxTokens) return own;
    const Range rows = b->computed(tp_index_);
    stats_.rows_sent +=
        double(std::max<int64_t>(0, own.begin - rows.begin) + std::max<int64_t>(0, rows.end - own.end));
    return rows;
  };
  mo.hooks.send_rows = [this](SharedRows what, int side, const float* values, size_t count) {
    stage_->send(tp_index_ + side, kTagRows[kind(what)], values, count * sizeof(float));
    stats_.bytes_sent += double(count * sizeof(float));
  };
  mo.hooks.recv_rows = [this](SharedRows what, int side, float* values, size_t count) {
    const auto t = SteadyClock::now();
    const size_t got = stage_->recv(tp_index_ + side, kTagRows[kind(what)], values, count * sizeof(float));
    const double waited = seconds_since(t);
    balance_[kind(what)].wait_seconds += waited;
    stats_.rows_wait_seconds += waited;
    if (got != count * sizeof(float))
      throw Error(fmt::format("distributed session: {} bytes of {} rows from rank {}, expected {}", got,
                              kRowsName[kind(what)], plan_.rank_of(stage_index_, tp_index_ + side),
                              count * sizeof(float)));
  };
}

void DistributedSession::note_balance_window(int64_t n_tokens, double ffn_seconds, double output_seconds) {
  if ((!balance_[0].balancer && !balance_[1].balancer) || opt_.balance_shift || n_tokens > RowBalancer::kMaxTokens)
    return;
  BalanceWindow& ffn = balance_[0].window;
  BalanceWindow& output = balance_[1].window;
  ffn.compute_seconds += ffn_seconds;
  output.compute_seconds += output_seconds;
  ffn.forwards += 1;
  output.forwards += 1;
  if (ffn.forwards < RowBalancer::kWindow) return;
  if (ffn.row_bytes == 0) {
    for (const LayerWeights& L : model_->weights().layers) {
      if (!L.w_gate.data) continue;
      ffn.row_bytes += double(row_bytes(L.w_gate.type, L.w_gate.cols) + row_bytes(L.w_up.type, L.w_up.cols));
      ffn.fixed_bytes += double(row_bytes(L.w_down.type, L.w_down.cols)) * double(L.w_down.rows);
    }
    const MatrixView& out = model_->weights().output;
    if (out.data) output.row_bytes = double(row_bytes(out.type, out.cols));
  }
  const BalanceWindow mine[2] = {ffn, output};
  balance_windows_.resize(size_t(2 * plan_.tp));
  const auto t = SteadyClock::now();
  stage_->all_gather(mine, balance_windows_.data(), sizeof mine);
  stats_.collective_seconds += seconds_since(t);
  for (size_t k = 0; k < 2; ++k) {
    if (!balance_[k].balancer) continue;
    std::vector<BalanceWindow> of_kind;
    for (int i = 0; i < plan_.tp; ++i) of_kind.push_back(balance_windows_[size_t(2 * i) + k]);
    balance_[k].balancer->observe(of_kind);
  }
  balance_[0].window.compute_seconds = balance_[1].window.compute_seconds = 0;
  balance_[0].window.forwards = balance_[1].window.forwards = 0;
}

}  // namespace shardlm::parallel
