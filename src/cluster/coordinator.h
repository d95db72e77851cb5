// The coordinator side of `shardlm run --nodes ...`: connects and
// authenticates to every worker, plans the layout from what they report
// (parallel/planner.h), gives each worker its slices (streamed, or mapped
// from the worker's own copy with --worker-model), then becomes world rank 0
// of the job's communicator. It holds no layers itself: the coordinator may be
// a laptop, and keeping it out of the plan means every rank of the plan is a
// worker with the same code path. It tokenizes, sends each request to the
// workers' rank 0 on its control connection, and receives the generated
// tokens there (8 bytes each). While it waits it watches every worker's
// heartbeats (cluster/heartbeat.h): a worker silent for peer_timeout, or
// whose connection closes, is named in the error and the others are told to
// give the job up, so they are idle again at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/heartbeat.h"
#include "cluster/port_range.h"
#include "cluster/protocol.h"
#include "cluster/shard.h"
#include "comm/communicator.h"
#include "model/sampler.h"
#include "parallel/planner.h"

namespace shardlm::gguf { class File; }

namespace shardlm::cluster {

struct ClusterOptions {
  std::vector<std::string> nodes;  // worker host:port, in rank order
  std::string token;
  parallel::PlanRequest plan;      // tp, pp, layers, n_ctx, kv_type, force
  int64_t n_batch = 512;
  int threads = 0;                 // per worker; 0: all its cores
  std::string worker_model;        // non-empty: workers map this path instead of receiving slices
  bool progress = true;            // progress bar on stderr
  double peer_timeout = kDefaultPeerTimeoutSeconds;  // silence that makes a worker dead
  PortRange comm_ports;            // where the job's links to the workers listen (--comm-port)
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

  // Runs one request (a fresh sequence; call again for the next); on_token is
  // called for every token. Throws Error naming the failed node when a worker
  // dies or fails.
  void generate(const std::vector<TokenId>& prompt, int32_t n_predict, const SamplerParams& sampling, TokenId eos,
                const std::function<void(TokenId)>& on_token);
  // Ends the job; the workers go back to idle. Returns where each worker's
  // time went, [worker][request] (a worker that failed to say: no entries).
  std::vector<std::vector<RequestStats>> finish();

 private:
  // A worker was found dead, silent or reporting an error while the job ran.
  enum class Fault { Lost, Silent, Reported };
  [[noreturn]] void fail_worker(size_t i, Fault fault, const std::string& what);
  // Something failed where no worker is known to be at fault yet.
  [[noreturn]] void fail_job(const std::string& what);
  void connect_workers(std::vector<parallel::NodeSpec>& nodes);
  void send_slices(const gguf::File& file, const std::vector<std::vector<ByteRange>>& ranges,
                   const std::vector<bool>& need);

  ClusterOptions opt_;
  parallel::Plan plan_;
  std::vector<std::unique_ptr<Channel>> workers_;
  std::shared_ptr<comm::Communicator> world_;
  ClusterStats stats_;
  bool finished_ = false;
  std::vector<std::chrono::steady_clock::time_point> last_heard_;
  std::unique_ptr<HeartbeatSender> beats_;  // declared after workers_: stops before they close
};

}  // namespace shardlm::cluster
