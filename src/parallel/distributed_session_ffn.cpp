// The dense FFN rows a tensor-parallel rank computes for its neighbours
// (parallel/ffn_balance.h): the forward pass's hooks, and the window of
// timings after which the ranks of a stage agree on new boundaries.
#include <fmt/format.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/matmul.h"
#include "parallel/distributed_session.h"

namespace shardlm::parallel {
namespace {

constexpr uint32_t kTagFfnRows = 4;  // on the stage's communicator

}  // namespace

void DistributedSession::install_ffn_hooks(ModelOptions& mo) {
  if (plan_.tp < 2) return;
  std::vector<Range> owned, held;
  bool margins = false;
  for (int i = 0; i < plan_.tp; ++i) {
    const RankPlan& r = plan_.ranks[size_t(plan_.rank_of(stage_index_, i))];
    owned.push_back(r.ff_rows);
    held.push_back(r.ff_held);
    margins |= r.ff_held != r.ff_rows;
  }
  if (!margins) return;
  ffn_balancer_ = std::make_unique<FfnBalancer>(std::move(owned), std::move(held));
  if (opt_.ffn_shift) ffn_balancer_->shift_all(*opt_.ffn_shift);
  mo.hooks.ffn_rows = [this](int64_t n_tokens) {
    const Range own = plan_.ranks[size_t(rank_)].ff_rows;
    if (n_tokens > FfnBalancer::kMaxTokens) return own;
    const Range rows = ffn_balancer_->computed(tp_index_);
    stats_.ffn_rows_sent += double(std::max<int64_t>(0, own.begin - rows.begin) +
                                   std::max<int64_t>(0, rows.end - own.end));
    return rows;
  };
  mo.hooks.ffn_send = [this](int side, const float* values, size_t count) {
    stage_->send(tp_index_ + side, kTagFfnRows, values, count * sizeof(float));
    stats_.bytes_sent += double(count * sizeof(float));
  };
  mo.hooks.ffn_recv = [this](int side, float* values, size_t count) {
    const auto t = SteadyClock::now();
    const size_t got = stage_->recv(tp_index_ + side, kTagFfnRows, values, count * sizeof(float));
    stats_.ffn_wait_seconds += seconds_since(t);
    if (got != count * sizeof(float))
      throw Error(fmt::format("distributed session: {} bytes of FFN rows from rank {}, expected {}", got,
                              plan_.rank_of(stage_index_, tp_index_ + side), count * sizeof(float)));
  };
}

void DistributedSession::note_ffn_window(int64_t n_tokens, double ffn_seconds) {
  if (!ffn_balancer_ || opt_.ffn_shift || n_tokens > FfnBalancer::kMaxTokens) return;
  ffn_window_.compute_seconds += ffn_seconds;
  ffn_window_.forwards += 1;
  if (ffn_window_.forwards < FfnBalancer::kWindow) return;
  if (ffn_window_.row_bytes == 0) {
    for (const LayerWeights& L : model_->weights().layers) {
      if (!L.w_gate.data) continue;
      ffn_window_.row_bytes += double(row_bytes(L.w_gate.type, L.w_gate.cols) + row_bytes(L.w_up.type, L.w_up.cols));
      ffn_window_.fixed_bytes += double(row_bytes(L.w_down.type, L.w_down.cols)) * double(L.w_down.rows);
    }
  }
  ffn_windows_.resize(size_t(plan_.tp));
  const auto t = SteadyClock::now();
  stage_->all_gather(&ffn_window_, ffn_windows_.data(), sizeof(FfnWindow));
  stats_.collective_seconds += seconds_since(t);
  ffn_balancer_->observe(ffn_windows_);
  ffn_window_.compute_seconds = 0;
  ffn_window_.forwards = 0;
}

}  // namespace shardlm::parallel
