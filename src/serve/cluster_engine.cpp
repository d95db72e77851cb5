#include "serve/cluster_engine.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "serve/session_engine.h"

namespace shardlm::serve {

namespace {
constexpr auto kRecoverInterval = std::chrono::seconds(2);
}

ClusterEngine::ClusterEngine(MakeJob make_job, int64_t n_slots, int64_t n_ctx, int64_t max_entries, int64_t n_vocab)
    : make_job_(std::move(make_job)), job_(make_job_()), n_slots_(n_slots), n_ctx_(n_ctx), max_entries_(max_entries),
      n_vocab_(n_vocab), builder_(n_slots, max_entries, n_ctx, n_vocab) {
  watcher_ = std::thread([this] { watch_idle(); });
}

ClusterEngine::~ClusterEngine() { stop_watcher(); }

void ClusterEngine::stop_watcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

std::vector<std::vector<cluster::RequestStats>> ClusterEngine::finish() {
  stop_watcher();
  std::lock_guard lock(mu_);
  return job_->finish();
}

void ClusterEngine::add(SlotId slot, const SamplerParams& params, std::span<const TokenId> kept_prefix) {
  std::lock_guard lock(mu_);
  builder_.add(slot, params, kept_prefix);
}

void ClusterEngine::free(SlotId slot) {
  std::lock_guard lock(mu_);
  builder_.free(slot);
}

std::vector<SampledToken> ClusterEngine::step(std::span<const StepEntry> entries) {
  std::lock_guard lock(mu_);
  return sampled_tokens(run(step_message(builder_, entries)));
}

void ClusterEngine::mark() {
  std::lock_guard lock(mu_);
  run(builder_.take(parallel::StepKind::Mark, {}));
}

// Under mu_.
std::vector<parallel::SlotToken> ClusterEngine::run(const parallel::StepMessage& m) {
  if (const std::string f = failure(); !f.empty()) throw Error(f);
  try {
    return job_->run(m);
  } catch (const Error& e) {
    set_failure(e.what());
    throw;
  }
}

void ClusterEngine::set_failure(const std::string& what) {
  std::lock_guard lock(failure_mu_);
  failure_ = what;
}

std::string ClusterEngine::failure() const {
  std::lock_guard lock(failure_mu_);
  return failure_;
}

std::string ClusterEngine::health() const { return failure(); }

bool ClusterEngine::recover() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (failure().empty() || now - last_recovery_ < kRecoverInterval) return false;
  last_recovery_ = now;
  try {
    auto fresh = make_job_();
    job_ = std::move(fresh);
  } catch (const Error& e) {
    spdlog::warn("serve: forming the cluster job again failed: {}", e.what());
    return false;
  }
  builder_ = parallel::StepBuilder(n_slots_, max_entries_, n_ctx_, n_vocab_);
  set_failure({});
  spdlog::info("serve: the cluster job is formed again (tp {} × pp {})", job_->plan().tp, job_->plan().pp);
  return true;
}

void ClusterEngine::watch_idle() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (stopping_ || !failure().empty()) continue;
    try {
      job_->check_idle();
    } catch (const Error& e) {
      set_failure(e.what());
      spdlog::error("serve: {}", e.what());
    }
  }
}

}  // namespace shardlm::serve
