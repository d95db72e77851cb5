// Engine on a cluster: the workers of a cluster::ClusterJob run the steps
// (parallel/distributed_session.h), sampling next to their vocabulary slices; this side
// keeps only the slots' bookkeeping and sends each step's operations and
// entries to the driving worker, which answers with token ids. Between steps
// a watcher reads the workers' heartbeats, so a worker that dies while the
// server is idle is noticed too. Once the job failed every step throws the
// failure (naming the node) and health() says it, until recover() forms a
// new job over the same nodes (at most one attempt per kRecoverInterval).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cluster/coordinator.h"
#include "serve/engine.h"

namespace shardlm::serve {

class ClusterEngine final : public Engine {
 public:
  using MakeJob = std::function<std::unique_ptr<cluster::ClusterJob>()>;
  // make_job() sets a job up with n_slots KV slots (options.plan.n_seq),
  // n_ctx positions and max_entries per step (options.n_batch); it is called
  // once here (its Error propagates) and again by recover().
  ClusterEngine(MakeJob make_job, int64_t n_slots, int64_t n_ctx, int64_t max_entries, int64_t n_vocab);
  ~ClusterEngine() override;

  int n_slots() const override { return int(n_slots_); }
  int64_t n_ctx() const override { return n_ctx_; }
  int64_t max_step_entries() const override { return max_entries_; }
  int64_t n_vocab() const override { return n_vocab_; }

  void add(SlotId slot, const SamplerParams& params, std::span<const TokenId> kept_prefix) override;
  void free(SlotId slot) override;
  std::vector<SampledToken> step(std::span<const StepEntry> entries) override;
  std::string health() const override;
  bool recover() override;

  // The current job's plan and setup stats.
  const cluster::ClusterJob& job() const { return *job_; }
  // Stops the watcher and ends the job (ClusterJob::finish); no step after it.
  std::vector<std::vector<cluster::RequestStats>> finish();

  // A stats period boundary on every worker (ClusterJob::finish reports one entry per period).
  void mark();

 private:
  std::vector<parallel::SlotToken> run(const parallel::StepMessage& m);
  void watch_idle();
  void stop_watcher();
  void set_failure(const std::string& what);
  std::string failure() const;

  MakeJob make_job_;
  std::unique_ptr<cluster::ClusterJob> job_;
  std::chrono::steady_clock::time_point last_recovery_{};
  int64_t n_slots_, n_ctx_, max_entries_, n_vocab_;
  parallel::StepBuilder builder_;
  std::mutex mu_;                  // the job: one step or idle check at a time
  mutable std::mutex failure_mu_;  // health() must not wait for a step
  std::string failure_;            // guarded by failure_mu_
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread watcher_;
};

}  // namespace shardlm::serve
