// `shardlm worker`: one daemon per machine that serves jobs from
// coordinators, one at a time. Every connection gets a thread of its own that
// authenticates it (with a deadline) and describes this machine (Info); so a
// port scanner, a health check or a second coordinator never delays anyone.
// While a job runs, another coordinator is told at once that the worker is
// busy, by whom and since when. A job runs in a process of its own
// (cluster/worker_job.h): whatever happens to it, the daemon is idle again
// when that process ends.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "net/frame_auth.h"
#include "net/socket.h"
#include "parallel/kernel_rates.h"
#include "parallel/token_costs.h"

namespace shardlm::cluster {

struct WorkerOptions {
  std::string listen = "0.0.0.0:7878";
  std::string token;
  std::string cache_dir;    // keep received shards here, keyed by content hash
  uint64_t cache_max_bytes = 0;  // 0: no limit; else least recently used shards are removed
  std::string port_file;    // write the bound port here (tests use port 0)
  size_t probe_bytes = size_t(64) << 20;  // memory-bandwidth probe at start
  int max_jobs = -1;        // -1: serve forever
  std::string log_level = "info";  // passed on to the job processes
};

// What the worker tells a coordinator about its machine.
struct MachineInfo {
  int64_t memory_available = 0;  // bytes (MemAvailable)
  int cores = 1;
  double bandwidth_gbs = 0;
  std::string host;
  std::string cpu;
  parallel::KernelRates kernel_rates;  // with all cores; reported in Info for the planner
  parallel::TokenCosts token_costs;    // likewise (one thread: the model's per-token work)
};

// MemAvailable of /proc/meminfo in bytes. SHARDLM_WORKER_MEM_MIB overrides it
// (to test the out-of-memory path without exhausting the machine).
int64_t memory_available_bytes();
std::string host_name();

class Worker {
 public:
  explicit Worker(WorkerOptions options);
  ~Worker();
  uint16_t port() const { return port_; }
  void serve();  // runs until max_jobs jobs were served (forever by default)

 private:
  void handle_connection(net::Fd fd);
  // `auth`: the connection's frame checks so far, which the job process carries on.
  void run_job(net::Fd fd, const std::string& peer, const net::FrameAuth& auth);
  nlohmann::json info_json();
  std::string busy_text();  // with mu_ held

  struct Busy {
    std::string coordinator;  // ip:port
    std::chrono::system_clock::time_point since;
  };

  WorkerOptions opt_;
  MachineInfo info_;
  net::Fd listener_;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Busy> busy_;
  int jobs_done_ = 0;
  int connections_ = 0;  // threads handling a connection
  bool stopping_ = false;
};

}  // namespace shardlm::cluster
