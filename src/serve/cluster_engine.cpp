#include "serve/cluster_engine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "serve/session_engine.h"

namespace shardlm::serve {

namespace {
constexpr auto kRecoverInterval = std::chrono::seconds(2);
}

ClusterEngine::ClusterEngine(MakeJob make_job, int64_t n_slots, int64_t n_ctx, int64_t max_entries, int64_t n_vocab)
    : make_job_(std::move(make_job)), job_(make_job_({})), n_slots_(n_slots), n_ctx_(n_ctx), max_entries_(max_entries),
      n_vocab_(n_vocab), builder_(n_slots, max_entries, n_ctx, n_vocab), job_nodes_(job_->nodes()) {
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
  std::lock_guard lock(state_mu_);
  failure_ = what;
}

std::string ClusterEngine::failure() const {
  std::lock_guard lock(state_mu_);
  return recovery_failure_.empty() ? failure_ : fmt::format("{}; forming the job again failed: {}", failure_, recovery_failure_);
}

std::string ClusterEngine::health() const { return failure(); }

std::vector<std::string> ClusterEngine::nodes() const {
  std::lock_guard lock(state_mu_);
  return job_nodes_;
}

namespace {

std::vector<std::string> joined(std::vector<std::string> a, std::span<const std::string> b) {
  for (const auto& node : b)
    if (std::find(a.begin(), a.end(), node) == a.end()) a.push_back(node);
  return a;
}

}  // namespace

bool ClusterEngine::recover() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (failure().empty() || now - last_recovery_ < kRecoverInterval) return false;
  last_recovery_ = now;
  // All nodes (the dead may be back); without those the failure found dead;
  // without those and the ones the failed job was already formed without.
  const std::vector<std::string> lost = job_->lost_nodes();
  std::vector<std::vector<std::string>> tries{{}};
  for (auto left_out : {lost, joined(lost, left_out_)})
    if (std::find(tries.begin(), tries.end(), left_out) == tries.end()) tries.push_back(std::move(left_out));
  std::string why;
  for (auto& left_out : tries) {
    try {
      auto job = make_job_(left_out);
      take_job(std::move(job), std::move(left_out));
      return true;
    } catch (const Error& e) {
      spdlog::warn("serve: forming the cluster job again{} failed: {}",
                   left_out.empty() ? "" : fmt::format(" without {}", fmt::join(left_out, ", ")), e.what());
      why = e.what();
    }
  }
  // What the last try met (a node still down, one busy with another job, none
  // left) is what the requests and /health say next, after the first failure.
  std::lock_guard state_lock(state_mu_);
  recovery_failure_ = why;
  return false;
}

void ClusterEngine::take_job(std::unique_ptr<cluster::ClusterJob> job, std::vector<std::string> left_out) {
  job_ = std::move(job);
  left_out_ = std::move(left_out);
  builder_ = parallel::StepBuilder(n_slots_, max_entries_, n_ctx_, n_vocab_);
  {
    std::lock_guard lock(state_mu_);
    failure_.clear();
    recovery_failure_.clear();
    job_nodes_ = job_->nodes();
  }
  spdlog::info("serve: the cluster job is formed again (tp {} × pp {} on {}{})", job_->plan().tp, job_->plan().pp,
               fmt::join(job_->nodes(), ", "),
               left_out_.empty() ? "" : fmt::format("; without {}, found dead", fmt::join(left_out_, ", ")));
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

cluster::ClusterOptions without_nodes(cluster::ClusterOptions options, std::span<const std::string> left_out) {
  if (left_out.empty()) return options;
  std::erase_if(options.nodes, [&](const std::string& node) {
    return std::find(left_out.begin(), left_out.end(), node) != left_out.end();
  });
  if (options.nodes.empty()) throw Error(fmt::format("--nodes: no worker left without {}", fmt::join(left_out, ", ")));
  options.plan.tp = options.plan.ep = options.plan.pp = 0;
  options.plan.layers.clear();
  return options;
}

}  // namespace shardlm::serve
