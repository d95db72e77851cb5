// The MPI backend: ranks and launch come from mpirun; point-to-point messages
// travel as MPI messages on a private duplicate of MPI_COMM_WORLD, so the
// project's own collective algorithms (and their deadlines) run on top.
//
// The Communicator's 64-bit tags do not fit MPI tags, so a message is sent as
// a 16-byte envelope {tag, length} (MPI tag kEnvelope) followed by its payload
// (kPayload), or, when small, as one kInline message holding both. Envelopes
// are probed in arrival order and matched here, like the other backends do.
//
// all_reduce (the Communicator's "native" choice, its default here) over the
// world calls MPI_Allreduce; it has no deadline inside. Reproducibility:
// the MPI standard only advises that every process get the same result;
// OpenMPI's coll/tuned (and basic) all-reduce algorithms (recursive doubling,
// ring, segmented ring, Rabenseifner) combine the partials in an order fixed
// by the algorithm, the process count and the message size, and copy one
// result to every rank, so for a fixed process count, size and selection the
// bits are the same on every rank and on every run. The selection itself is
// OpenMPI's fixed decision table unless coll_tuned_use_dynamic_rules is set
// (docs.open-mpi.org, "Tuning Collectives": a decision tree on communicator
// and message size thresholds baked into the build, nothing measured at run
// time; tested in test_mpi_world.cc: same bits on every rank and every call);
// pin it with OMPI_MCA_coll_tuned_use_dynamic_rules=1 and
// OMPI_MCA_coll_tuned_allreduce_algorithm=N when results must not move
// between OpenMPI versions. f16/bf16 sums use MPI_Allreduce too, as 16-bit
// words with a user op that widens to f32 and rounds once per addition (the
// same algorithms, so the same guarantee); their max falls back to the
// project's algorithms over the links. all_gather, broadcast and barrier are
// MPI's own too (they copy bits, nothing to order). A split group gets its
// own MPI communicator on its first native collective (comm_for).
//
// Thread level: MPI_THREAD_SERIALIZED (calls from any thread, one at a time:
// the WorldState lock), or MPI_THREAD_SINGLE when the caller promises that
// only the connecting thread calls (ConnectOptions::only_connecting_thread_calls:
// bench comm, run and bench over mpirun), which spares every MPI call
// OpenMPI's internal locks.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only; no libmpi_cxx
#endif
#include <mpi.h>

#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/inbox.h"
#include "comm/transport.h"
#include "comm/wait_policy.h"

namespace shardlm::comm::mpi {

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(const ConnectOptions& options);
  ~MpiTransport() override;

  std::string_view backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe_peer(int peer) const override;

  RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int peer, uint64_t tag, void* data, size_t capacity) override;
  bool test(const RequestPtr& r) override;
  void wait_all(std::span<const RequestPtr> requests, Deadline deadline) override;
  void abort(const std::string& reason) noexcept override;

  bool all_reduce(const Group& g, void* buf, size_t count, DType dtype, ReduceOp op, Deadline deadline) override;
  // Copies only, so MPI's own are exact whatever its algorithm.
  bool all_gather(const Group& g, const void* send, void* recv, size_t bytes_per_rank, Deadline deadline) override;
  bool broadcast(const Group& g, void* buf, size_t bytes, int root_index, Deadline deadline) override;
  bool barrier(const Group& g, Deadline deadline) override;

 private:
  MPI_Comm comm_for(const Group& g);
  struct SendReq;
  struct Peer;

  void throw_if_failed() const;
  void progress();
  void progress_in(int p);
  void post_payload(int p, Inbox::Delivery delivery);
  [[noreturn]] void fail_peer(int p, const std::string& what) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  // Parent of the group communicators: MPI_Comm_create_group exchanges
  // point-to-point messages on its parent, which progress_in's any-tag probe
  // of comm_ would otherwise take for a peer's message.
  MPI_Comm groups_parent_ = MPI_COMM_NULL;
  std::map<uint32_t, MPI_Comm> group_comms_;  // by Group::context
  MPI_Op sum_f16_ = MPI_OP_NULL, sum_bf16_ = MPI_OP_NULL;
  int rank_ = 0, size_ = 1;
  WaitRule wait_rule_;
  // Set with ConnectOptions::only_connecting_thread_calls: the one thread
  // allowed in (throw_if_failed checks).
  std::thread::id calling_thread_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::list<std::shared_ptr<SendReq>> sends_;
  std::optional<std::string> failed_;
};

}  // namespace shardlm::comm::mpi
