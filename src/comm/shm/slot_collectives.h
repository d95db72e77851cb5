// Collectives done directly in the segment's slots, for the world group.
//
// Every collective is a sequence of steps. In a step each rank stages data in
// its slot of parity (step & 1), publishes its step word and waits for every
// peer's word to reach the same step; then it reads the peers' slots. A slot
// is rewritten two steps later, after every peer has announced the step in
// between, so it has been read: double buffering without any extra flag.
//
// all_reduce, one-shot: every rank stages a chunk, steps, and sums all slots
// itself in rank order (one step a chunk). Split: in the step that stages
// chunk k, rank r reduces its 1/n share of chunk k (rank order) into the
// shared result area and copies chunk k-1 out of it, so every element is
// reduced once, at one more step and one more copy. Per byte and rank,
// one-shot moves n + 3 bytes through memory (copy in, read n slots, write)
// and split 4 + (n+1)/n, so one-shot is cheaper at every size for two ranks
// and split from three on, except below `one_shot_bytes` where the extra
// step costs more than the bytes. Both sum every element in rank order, so
// they give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/shm/segment.h"
#include "comm/transport.h"

namespace shardlm::comm::shm {

class Collectives {
 public:
  explicit Collectives(const Segment& segment);

  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op, Deadline deadline);
  void reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype, ReduceOp op,
                      Deadline deadline);
  void all_gather(const void* send, void* recv, size_t bytes_per_rank, Deadline deadline);
  void broadcast(void* buf, size_t bytes, int root, Deadline deadline);
  void barrier(Deadline deadline);

  size_t one_shot_bytes() const { return one_shot_bytes_; }
  bool one_shot(size_t bytes) const { return world_ == 2 || bytes <= one_shot_bytes_; }
  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  // Publishes the next step and waits for every peer to reach it; returns
  // the parity of that step.
  int step(Deadline deadline, const char* what);

  const Segment& seg_;
  int rank_, world_;
  uint32_t step_ = 0;
  size_t one_shot_bytes_, chunk_bytes_;
};

}  // namespace shardlm::comm::shm
