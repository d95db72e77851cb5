// `shardlm worker`: one process per machine that serves jobs from
// coordinators, one after another. A job is: authenticate, describe this
// machine, receive the plan and this rank's slices of the weights (or map a
// local copy of the model), join the job's communicator, follow the parallel
// runtime until the coordinator ends the job. Whatever goes wrong in a job
// (coordinator gone, peer killed, bad input, no memory) is logged, reported
// to the coordinator when it is still there, and the worker is idle again.
#pragma once

#include <cstdint>
#include <string>

#include "parallel/kernel_rates.h"

namespace shardlm::cluster {

struct WorkerOptions {
  std::string listen = "0.0.0.0:7878";
  std::string token;
  std::string cache_dir;    // keep received shards here, keyed by content hash
  std::string port_file;    // write the bound port here (tests use port 0)
  size_t probe_bytes = size_t(64) << 20;  // memory-bandwidth probe at start
  int max_jobs = -1;        // -1: serve forever
};

// What the worker tells a coordinator about its machine.
struct MachineInfo {
  int64_t memory_available = 0;  // bytes (MemAvailable)
  int cores = 1;
  double bandwidth_gbs = 0;
  std::string host;
  parallel::KernelRates kernel_rates;  // with all cores; reported in Info for the planner
};

// MemAvailable of /proc/meminfo in bytes. SHARDLM_WORKER_MEM_MIB overrides it
// (to test the out-of-memory path without exhausting the machine).
int64_t memory_available_bytes();

class Worker {
 public:
  explicit Worker(WorkerOptions options);
  uint16_t port() const { return port_; }
  void serve();  // runs until max_jobs jobs were served (forever by default)

 private:
  void serve_job(int fd);

  WorkerOptions opt_;
  MachineInfo info_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace shardlm::cluster
