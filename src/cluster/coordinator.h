// The coordinator side of `shardlm run --nodes ...`: connects and
// authenticates to every worker, plans the layout from what they report
// (parallel/planner.h), gives each worker its slices (streamed, or mapped
// from the worker's own copy with --worker-model), then becomes world rank 0
// of the job's communicator. It holds no layers itself: the coordinator may be
// a laptop, and keeping it out of the plan means every rank of the plan is a
// worker with the same code path. It runs the workers' step-level engine
// (parallel/distributed_session.h): each step's sequence operations and entries go to the
// workers' rank 0 on its control connection as one Request frame, the sampled
// tokens come back in one Token frame (8 bytes per token). While it waits it watches every worker's
// heartbeats (cluster/heartbeat.h): a worker silent for peer_timeout, or
// whose connection closes, is named in the error and the others are told to
// give the job up, so they are idle again at once.
#pragma once

#include <cstdint>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/heartbeat.h"
#include "net/port_range.h"
#include "cluster/protocol.h"
#include "cluster/shard.h"
#include "comm/communicator.h"
#include "core/clock.h"
#include "model/sampler.h"
#include "parallel/planner.h"
#include "parallel/step_message.h"

namespace shardlm::gguf { class File; }

namespace shardlm::cluster {

struct ClusterOptions {
  std::vector<std::string> nodes;  // worker host:port, in rank order
  std::string token;
  parallel::PlanRequest plan;      // tp, pp, layers, n_ctx, n_seq (KV slots), kv_type, force
  int64_t n_batch = 512;           // most entries per step
  int threads = 0;                 // per worker; 0: all its cores
  bool batch_invariant = false;    // ModelOptions::batch_invariant on every worker
  std::string worker_model;        // non-empty: workers map this path instead of receiving slices
  bool progress = true;            // progress bar on stderr
  double peer_timeout = kDefaultPeerTimeoutSeconds;  // silence that makes a worker dead
  net::PortRange comm_ports;       // where the job's links listen, here and on the workers (--comm-port)
};

struct ClusterStats {
  uint64_t bytes_sent = 0;    // slice bytes streamed
  int cached = 0;             // workers that already had their shard
  double setup_seconds = 0;
};

class ClusterJob {
 public:
  // Everything up to a ready communicator. Throws Error naming the worker at fault.
  ClusterJob(const gguf::File& file, const ClusterOptions& options);
  ~ClusterJob();

  const parallel::Plan& plan() const { return plan_; }
  const ClusterStats& stats() const { return stats_; }
  // The workers in the job, in rank order (the planner may have left some of --nodes out).
  const std::vector<std::string>& nodes() const { return opt_.nodes; }

  // Runs one step message (StepKind::Step or Mark) on the workers; returns
  // the sampled tokens in entry order. Throws Error naming the failed node
  // when a worker dies, goes silent or fails; the job is over then.
  std::vector<parallel::SlotToken> run(const parallel::StepMessage& message);
  // Between steps: reads the workers' heartbeats so that their connections
  // never fill, and throws like run() when one died or went silent.
  void check_idle();
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }
  // The workers found dead or silent when the job failed (not those that reported an error).
  const std::vector<std::string>& lost_nodes() const { return lost_nodes_; }
  // Ends the job; the workers go back to idle. Returns where each worker's
  // time went, [worker][period between marks] (a worker that failed to say: no entries).
  std::vector<std::vector<RequestStats>> finish();

 private:
  // A worker was found dead, silent or reporting an error while the job ran.
  enum class Fault { Lost, Silent, Reported };
  [[noreturn]] void fail_worker(size_t i, Fault fault, const std::string& what);
  // Something failed where no worker is known to be at fault yet.
  [[noreturn]] void fail_job(const std::string& what);
  std::optional<Message> watch(int timeout_ms);
  std::vector<parallel::SlotToken> step_tokens(const std::vector<uint8_t>& payload, const parallel::StepMessage& message);
  void connect_workers(std::vector<parallel::NodeSpec>& nodes);
  // Plans the layout and lets the workers it leaves out go.
  void place_workers(const gguf::File& file, const std::vector<parallel::NodeSpec>& nodes);
  nlohmann::json job_message(size_t i, const gguf::File& file, const std::vector<ByteRange>& ranges,
                             uint16_t comm_port) const;
  // Rank 0 of the job's communicator, listening on `listener`.
  void join_world(net::Fd listener);
  void send_slices(const gguf::File& file, const std::vector<std::vector<ByteRange>>& ranges,
                   const std::vector<bool>& need);

  ClusterOptions opt_;
  parallel::Plan plan_;
  std::vector<std::unique_ptr<Channel>> workers_;
  std::shared_ptr<comm::Communicator> world_;
  ClusterStats stats_;
  bool finished_ = false;
  std::string failure_;  // why the job failed, once it has
  std::vector<std::string> lost_nodes_;
  int64_t n_vocab_ = 0;
  std::vector<SteadyClock::time_point> last_heard_;
  std::unique_ptr<HeartbeatSender> beats_;  // declared after workers_: stops before they close
};

}  // namespace shardlm::cluster
