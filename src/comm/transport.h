// What a communication backend (tcp, shm, mpi) supplies to the Communicator:
// point-to-point links from this rank to every other rank of the world, plus
// optional collective fast paths. The collective algorithms (one-shot and
// recursive doubling in comm/algorithms.cpp, ring.cpp, chain.cpp) are written
// once on top of isend/irecv/wait_all below; a backend only moves bytes. Each
// backend lives in its own folder (comm/tcp, comm/shm, comm/mpi) and shows
// the rest of comm only its factory (comm/<backend>/<backend>.h).
//
// Contract, in full (a backend author needs nothing else):
//
// * Threading. The Communicator serializes every call into one Transport (all
//   communicators split from one world share one Transport and one lock), so a
//   backend needs no locking of its own. Calls may come from different
//   threads, never concurrently.
//
// * Messages. isend/irecv move one message of `bytes` bytes (0 is allowed)
//   with a 64-bit tag. The tag is opaque to the backend (the Communicator packs
//   a communicator context and a sequence number into it); the backend matches
//   a received message to the OLDEST posted irecv with the same (peer, tag).
//   Messages between one pair of ranks with the same tag are delivered in the
//   order they were sent. A message that arrives before its irecv is posted
//   is buffered by the backend (bounded: a backend may stop reading from that
//   peer instead of buffering without limit — back-pressure, never
//   over-allocation). A message longer than the posted irecv's capacity is an
//   error naming the peer; a shorter one completes the irecv with
//   Request::bytes() = its length.
//
// * Progress. Nothing needs to progress outside of test()/wait_all(): the
//   Communicator calls them while it waits. isend may complete immediately.
//   A send is complete once its buffer may be reused.
//
// * Waiting. wait_all() must not burn a core forever: poll without blocking
//   as comm/wait_policy.h says (one rule for all backends, from the ranks on
//   this host vs usable cores, or Timeouts::spin when set), then block in the
//   OS (poll(2), futex, ...) until progress or the deadline. 2–4 ranks share
//   2 cores in tests.
//
// * Failure. Any failure (peer closed, peer sent garbage, deadline passed)
//   throws shardlm::Error with ONE line naming the peer as describe_peer()
//   does, e.g. "rank 2 (127.0.0.1:40211): connection closed by peer". After
//   the first failure the Transport is failed: it tells every peer it can
//   (best effort, so that they fail fast instead of waiting for their own
//   timeout) and every later call throws again at once with the first error.
//   Communicator calls abort(reason) itself when an algorithm fails for a
//   reason the backend did not see (e.g. a deadline in a fast path).
//
// * Fast paths. A backend may override the collective hooks at the bottom;
//   each returns false to fall back to the generic algorithms. A fast path
//   must produce bit-identical results on every rank of the group, must sum
//   f16/bf16 in f32 and round once per addition at most, and must honour the
//   deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/dtype.h"

namespace shardlm::comm {

enum class ReduceOp : uint8_t { Sum, Max };

std::string_view reduce_op_name(ReduceOp op);

// One posted isend or irecv. A backend derives from it to keep its own state
// and marks completion with finish(); the Communicator only reads done() and
// bytes() and keeps the object alive (shared_ptr) until then.
class Request {
 public:
  Request(int peer, uint64_t tag, bool is_send) : peer_(peer), tag_(tag), is_send_(is_send) {}
  virtual ~Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  int peer() const { return peer_; }
  uint64_t tag() const { return tag_; }
  bool is_send() const { return is_send_; }
  bool done() const { return done_; }
  size_t bytes() const { return bytes_; }  // bytes moved (the received length for irecv)

  void finish(size_t bytes) {
    bytes_ = bytes;
    done_ = true;
  }

 private:
  int peer_;
  uint64_t tag_;
  bool is_send_;
  bool done_ = false;
  size_t bytes_ = 0;
};
using RequestPtr = std::shared_ptr<Request>;

// A set of world ranks that runs collectives together (the world, or a
// split() of it). ranks[i] is the world rank of group rank i, in group order.
struct Group {
  std::vector<int> ranks;
  int my_index = 0;        // this process's group rank
  uint32_t context = 0;    // unique per communicator, equal on all its members
  int size() const { return int(ranks.size()); }
};

struct Timeouts {
  // A collective or point-to-point call that has not completed by then fails
  // naming the peer it waits for.
  std::chrono::milliseconds op{30000};
  // Connecting, authenticating and exchanging addresses at start-up.
  std::chrono::milliseconds connect{30000};
  // How long a waiter polls without blocking before it sleeps in the OS;
  // negative: comm/wait_policy.h chooses (the default).
  std::chrono::microseconds spin{-1};
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string_view backend() const = 0;  // "tcp", "shm", "mpi"
  virtual int rank() const = 0;                  // world rank
  virtual int size() const = 0;                  // world size
  // "rank 2 (10.0.0.5:40211)": used in every error about that peer.
  virtual std::string describe_peer(int peer) const = 0;
  // True when messages to `peer` go through this host's own network stack
  // (TCP over loopback), so both directions of the link cost the same CPUs.
  virtual bool shares_host(int /*peer*/) const { return false; }

  // Start moving one message; `data` must stay valid (and, for isend,
  // unchanged) until the request is done. peer != rank().
  virtual RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) = 0;
  virtual RequestPtr irecv(int peer, uint64_t tag, void* data, size_t capacity) = 0;
  // Optional: a receive of exactly `count` elements that combines the message
  // into `acc` as its bytes arrive (acc op msg, or msg op acc when
  // message_first; the bits of an irecv into a buffer followed by
  // reduce_ordered, comm/reduce.h), so no buffer and no second pass over it.
  // `acc` is neither read nor written by anyone else until the request is
  // done. Matched like an irecv. nullptr: the backend has none (the caller
  // receives into a buffer and reduces).
  virtual RequestPtr irecv_reduce(int /*peer*/, uint64_t /*tag*/, void* /*acc*/, size_t /*count*/,
                                  DType, ReduceOp, bool /*message_first*/) {
    return nullptr;
  }

  // Make whatever progress is possible without blocking; true if `r` is done.
  virtual bool test(const RequestPtr& r) = 0;
  // Block (spin, then sleep) until every request is done or `deadline`
  // passes; on timeout throws an Error naming a peer that is still pending.
  virtual void wait_all(std::span<const RequestPtr> requests, Deadline deadline) = 0;

  // Fail the transport: tell the peers (best effort) and make every later
  // call throw Error(reason). Idempotent; never throws.
  virtual void abort(const std::string& reason) noexcept = 0;

  // ---- optional fast paths (return false = use the generic algorithms) ----
  virtual bool all_reduce(const Group&, void* /*buf*/, size_t /*count*/, DType, ReduceOp,
                          Deadline) {
    return false;
  }
  // recv holds group.size() blocks of `bytes_per_rank`, in group order.
  virtual bool all_gather(const Group&, const void* /*send*/, void* /*recv*/,
                          size_t /*bytes_per_rank*/, Deadline) {
    return false;
  }
  // send holds group.size() blocks of `count_per_rank` elements.
  virtual bool reduce_scatter(const Group&, const void* /*send*/, void* /*recv*/,
                              size_t /*count_per_rank*/, DType, ReduceOp, Deadline) {
    return false;
  }
  virtual bool broadcast(const Group&, void* /*buf*/, size_t /*bytes*/, int /*root_index*/,
                         Deadline) {
    return false;
  }
  virtual bool barrier(const Group&, Deadline) { return false; }
};

// ---- creating a transport ----------------------------------------------------
// Everything needed to join a world. Backends read the fields they need.
struct ConnectOptions {
  std::string backend = "tcp";  // tcp | shm | mpi
  int rank = -1;                // -1: the backend decides (mpi)
  int size = -1;
  // tcp: rank 0 listens here ("host:port"; port 0 only with listen_fd), the
  // others connect here. shm: names the session (all ranks pass the same).
  std::string coordinator;
  // tcp: an already bound and listening socket to take over (rank 0: where
  // the others connect; ranks 1..n-2: where the higher ranks connect), so the
  // caller chooses the port (a firewall's range); -1: rank 0 listens on
  // `coordinator`, ranks 1..n-2 on a port the OS chooses (the last rank
  // listens nowhere).
  int listen_fd = -1;
  std::string token;            // shared secret (see load_token)
  std::string cluster_id = "shardlm";
  Timeouts timeouts;
  // tcp: called about every 100 ms while the rendezvous waits for peers to
  // connect; whatever it throws ends the rendezvous at once. Whoever knows
  // more than the comm layer (a coordinator that hears a member died) tells
  // it here instead of letting it wait out timeouts.connect.
  std::function<void()> while_waiting;
  // mpi: the caller promises that every call on this transport comes from
  // the thread that connects (other threads, e.g. a compute pool, never
  // enter MPI). MPI is then initialised at MPI_THREAD_SINGLE instead of
  // MPI_THREAD_SERIALIZED: OpenMPI 4.1 turns on its internal locking for any
  // level above SINGLE (ompi_mpi_init.c), which cost 3-15 % of a 4-rank
  // MPI_Allreduce on 2 cores (docs/bench/comm7.md). A call from another
  // thread then fails with an Error instead of racing inside MPI.
  bool only_connecting_thread_calls = false;
};

// Dispatches on options.backend; a backend this binary was configured
// without throws Error saying so (comm/CMakeLists.txt).
std::unique_ptr<Transport> connect_transport(const ConnectOptions& options);

// The shared token: $SHARDLM_TOKEN, else the first line of token_file (when
// not empty). Throws Error when neither gives a non-empty token.
std::string load_token(const std::string& token_file = "");

}  // namespace shardlm::comm
