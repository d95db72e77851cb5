// The Communicator: rank/size, tagged point-to-point and the collectives used
// by tensor and pipeline parallelism, over any Transport (comm/transport.h).
//
// Rules (as MPI): every member of a communicator calls the same collectives
// in the same order with the same count/dtype/op/root. Sizes are in elements
// for the reducing ops and in bytes for the copying ones. Buffers of a
// collective may not overlap unless stated (all_reduce is in place).
//
// Every call completes or throws shardlm::Error naming the peer it was
// waiting for, within CommConfig::timeouts.op; after one failure the whole
// communicator family (world and its splits) is failed and every later call
// throws at once. Results are bit-identical on every rank: sums are done in a
// fixed order (one-shot: rank order 0..n-1; ring: each segment's owner in
// ring order, then its bits are copied; chain: rank 0's bits; native: the
// backend's, see shm/slot_collectives.h and mpi/mpi_transport.h), f16/bf16 are
// reduced in f32 and rounded. Which algorithm runs depends on the tuning
// table (comm/tuning.h), so the bits are reproducible for one table, group
// size and message size.
//
// Point-to-point calls may come from several threads (one call at a time
// reaches the transport). Collectives and split() take one call at a time
// per communicator: their sequence numbers, like their order, must match
// across ranks, which concurrent callers could not keep anyway.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/transport.h"

namespace shardlm::comm {

// Native: the backend's own all-reduce (Transport::all_reduce: shm slots,
// MPI_Allreduce); where it declines (e.g. f16 over MPI), the size default.
enum class AllReduceAlgo : uint8_t { Auto, OneShot, RecursiveDoubling, Ring, Chain, HalvingDoubling, Native };
// "auto", "oneshot", "recdbl", "ring", "chain", "halving", "native"
std::string_view algo_name(AllReduceAlgo a);

struct AllReduceChoice {
  AllReduceAlgo algo = AllReduceAlgo::Auto;
  size_t chunk_bytes = 0;  // ring/chain pieces; 0: CommConfig::ring_chunk_bytes
};

class TuningTable;  // comm/tuning.h

struct CommConfig {
  Timeouts timeouts;
  // Auto takes the tuning table's row for this backend, group size, link
  // kind and size (comm/tuning.h; `shardlm bench comm --tune` writes it).
  // Without one: the backend's own all-reduce where it has one (shm, mpi),
  // else one-shot below `small_bytes`, recursive doubling below
  // `ring_from_bytes`, ring above; but chain from `chain_from_bytes` on for
  // two ranks on one host (their link's two directions share the same CPUs),
  // and halving-doubling below `halving_below_bytes` for groups of 4, 8, ...
  // ranks (a ring's bytes in 2 log2 n steps instead of 2(n-1); one message
  // a step, where the ring pipelines pieces, so not for the largest sizes).
  // A forced algorithm (not Auto) runs as asked, without the backend's own.
  // Env overrides: SHARDLM_ALLREDUCE_ALGO=oneshot|recdbl|ring|chain|halving|native|auto,
  // SHARDLM_ALLREDUCE_SMALL_BYTES, SHARDLM_ALLREDUCE_RING_FROM_BYTES,
  // SHARDLM_ALLREDUCE_CHAIN_FROM_BYTES, SHARDLM_ALLREDUCE_HALVING_BELOW_BYTES,
  // SHARDLM_RING_CHUNK_BYTES.
  AllReduceAlgo algo = AllReduceAlgo::Auto;
  size_t small_bytes = 32 << 10;
  size_t ring_from_bytes = 256 << 10;
  size_t chain_from_bytes = 4 << 20;
  size_t halving_below_bytes = 16 << 20;
  // Ring pipelining: each ring step is sent in pieces of at most this size so
  // that sending, receiving and reducing overlap.
  size_t ring_chunk_bytes = 512 << 10;
  bool allow_fast_paths = true;  // let the backend's collective overrides run
  std::shared_ptr<const TuningTable> tuning;  // null: the defaults above
  // The table came from this rank's own file (from_env): create() checks that
  // every rank holds the same one and drops it (with a warning) if not.
  bool tuning_from_file = false;

  // Defaults, then the SHARDLM_ALLREDUCE_* environment variables and the
  // tuning file (TuningTable::load_default).
  static CommConfig from_env();
};

class WorldState;  // comm/world_state.h: shared by a world and its splits

class Communicator : public std::enable_shared_from_this<Communicator> {
 public:
  // The world communicator over a connected transport.
  static std::shared_ptr<Communicator> create(std::unique_ptr<Transport> transport,
                                              CommConfig config = CommConfig::from_env());
  // connect_transport(options) + create().
  static std::shared_ptr<Communicator> connect(const ConnectOptions& options,
                                               CommConfig config = CommConfig::from_env());

  Communicator(std::shared_ptr<WorldState> world, Group group);
  ~Communicator();

  int rank() const { return group_.my_index; }
  int size() const { return group_.size(); }
  int world_rank(int rank) const { return group_.ranks.at(size_t(rank)); }
  const Group& group() const { return group_; }
  std::string_view backend() const;
  const CommConfig& config() const;

  // ---- point to point (peer is a rank of this communicator; tag < 2^31) ---
  void send(int peer, uint32_t tag, const void* data, size_t bytes);
  // Returns the received length; a longer message than `capacity` is an error.
  size_t recv(int peer, uint32_t tag, void* data, size_t capacity);

  // ---- collectives ---------------------------------------------------------
  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op = ReduceOp::Sum);
  // With this algorithm and piece size instead of the configured choice
  // (tuning and tests); every rank must pass the same.
  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op, AllReduceChoice choice);
  // recv = size() blocks of bytes_per_rank, block i from rank i.
  void all_gather(const void* send, void* recv, size_t bytes_per_rank);
  // send = size() blocks of count_per_rank elements; rank i gets the reduced block i.
  void reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype,
                      ReduceOp op = ReduceOp::Sum);
  void broadcast(void* buf, size_t bytes, int root);
  void barrier();

  // Collective over this communicator: members with equal color form a new
  // communicator, ordered by (key, old rank). color < 0: not in any (returns
  // nullptr). Reuses the parent's links.
  std::shared_ptr<Communicator> split(int color, int key);

  // Which algorithm all_reduce would use for this many bytes (after overrides).
  AllReduceAlgo choose_all_reduce(size_t bytes) const;
  AllReduceChoice choose_all_reduce_choice(size_t bytes) const;
  // Every peer of this communicator is reached over this host's network stack.
  bool loopback_links() const;

 private:
  uint64_t next_collective_tag();
  uint64_t user_tag(uint32_t tag) const;
  void agree_on_tuning();

  std::shared_ptr<WorldState> world_;
  Group group_;
  uint32_t collective_seq_ = 0;
  uint32_t split_seq_ = 0;
};

}  // namespace shardlm::comm
