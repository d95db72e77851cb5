// A cluster started by an MPI launcher (mpirun, mpiexec, srun --mpi=pmix)
// instead of worker daemons: every MPI rank is a rank of the plan and all
// traffic (all-reduces, stage hand-offs, sampling, control) goes through the
// MPI communicator, so whatever fabric MPI drives (vader shared memory, TCP,
// UCX over RDMA) carries it. MPI's launch is the trust boundary: no tokens,
// no ports of our own.
//
// Every rank opens the model at the same path (a shared file system or a
// local copy; or only rank 0 does, with distribute_weights), describes itself (host, memory, cores, read bandwidth, kernel
// rates), the descriptions are all-gathered, and every rank computes the
// same plan from them. Ranks on one host share its memory and cores. Rank 0
// drives; ranks the plan leaves out wait for the end.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "gguf/gguf.h"
#include "parallel/planner.h"
#include "parallel/distributed_session.h"

namespace shardlm::cluster {

// True when an MPI launcher started this process (its rank is in the environment).
bool started_by_mpi_launcher();

struct MpiJobOptions {
  parallel::PlanRequest plan;        // layout request; n_ctx, kv_type and wire type as well
  parallel::DistributedSessionOptions runtime;  // threads 0: this host's cores shared by its ranks
  double op_timeout_seconds = 600;   // a rank silent this long in a collective is named
  bool distribute_weights = false;   // only rank 0 reads the model; it sends the others their slices
  std::string cache_dir;             // with distribute_weights: keep received slices here (cluster/mpi_weights.h)
  // Every step runs on the thread that makes the job (run, bench; not serve,
  // whose scheduler thread drives): MPI at MPI_THREAD_SINGLE, without
  // OpenMPI's locks (comm::ConnectOptions::only_connecting_thread_calls).
  bool only_this_thread_calls = false;
};

class MpiJob {
 public:
  // Collective over all ranks started by the launcher. Throws Error (naming
  // the rank and host) when any rank fails to open the model or build its slice.
  MpiJob(const std::string& model_path, MpiJobOptions options);
  ~MpiJob();

  int rank() const { return world_rank_; }
  int world_size() const { return int(hosts_.size()); }
  bool in_plan() const { return session_ != nullptr; }
  const parallel::Plan& plan() const { return plan_; }
  const std::vector<std::string>& hosts() const { return hosts_; }  // by rank
  const gguf::File& file() const { return *file_; }
  // Only for ranks in the plan.
  parallel::DistributedSession& session() { return *session_; }

  // Ranks other than 0: follow rank 0's requests until it finishes. Rank 0:
  // end the followers. Every rank calls it once, last.
  void finish();

 private:
  std::shared_ptr<comm::Communicator> world_;
  std::unique_ptr<gguf::File> file_;
  std::string temp_dir_;  // removed at the end
  std::vector<std::string> hosts_;
  parallel::Plan plan_;
  std::unique_ptr<parallel::DistributedSession> session_;
  int world_rank_ = 0;
};

}  // namespace shardlm::cluster
