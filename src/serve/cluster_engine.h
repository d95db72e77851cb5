// Engine on a cluster: the workers of a cluster::ClusterJob run the steps
// (parallel/distributed_session.h), sampling next to their vocabulary slices; this side
// keeps only the slots' bookkeeping and sends each step's operations and
// entries to the driving worker, which answers with token ids. Between steps
// a watcher reads the workers' heartbeats, so a worker that dies while the
// server is idle is noticed too. Once the job failed every step throws the
// failure (naming the node) and health() says it, until recover() forms a
// new job (at most one attempt per kRecoverInterval): over all the nodes
// first, so a node that is back is taken in again; failing that, over the
// nodes minus those found dead, if the planner finds a layout there. A job
// on fewer nodes is kept until its next failure (a node back meanwhile is
// taken in then): forming a job again while one serves would drop every
// slot's cache and stall the streams for the setup.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cluster/coordinator.h"
#include "serve/engine.h"

namespace shardlm::serve {

class ClusterEngine final : public Engine {
 public:
  using MakeJob = std::function<std::unique_ptr<cluster::ClusterJob>(std::span<const std::string> left_out)>;
  // make_job(left_out) sets a job up over the nodes except `left_out` (see
  // without_nodes) with n_slots KV slots (options.plan.n_seq), n_ctx
  // positions and max_entries per step (options.n_batch); it is called once
  // here with none left out (its Error propagates) and again by recover().
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
  std::vector<std::string> nodes() const override;
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
  // Under mu_: a fresh job, made without `left_out`, replaces the failed one.
  void take_job(std::unique_ptr<cluster::ClusterJob> job, std::vector<std::string> left_out);

  MakeJob make_job_;
  std::unique_ptr<cluster::ClusterJob> job_;
  std::vector<std::string> left_out_;  // the nodes job_ was made without; guarded by mu_
  std::chrono::steady_clock::time_point last_recovery_{};
  int64_t n_slots_, n_ctx_, max_entries_, n_vocab_;
  parallel::StepBuilder builder_;
  std::mutex mu_;                  // the job: one step or idle check at a time
  mutable std::mutex state_mu_;    // health() and nodes() must not wait for a step
  std::string failure_;            // guarded by state_mu_
  std::string recovery_failure_;   // the last recover()'s reason; guarded by state_mu_
  std::vector<std::string> job_nodes_;  // guarded by state_mu_
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread watcher_;
};

// `options` for a job over its nodes but `left_out`. The layout asked for
// (--tp/--ep/--pp/--layers) was for all of them, so the planner chooses
// again. Throws Error when no node is left.
cluster::ClusterOptions without_nodes(cluster::ClusterOptions options, std::span<const std::string> left_out);

}  // namespace shardlm::serve
