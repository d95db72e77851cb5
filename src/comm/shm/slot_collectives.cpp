#include "comm/shm/slot_collectives.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/reduce.h"
#include "core/env.h"

namespace shardlm::comm::shm {

Collectives::Collectives(const Segment& segment)
    : seg_(segment), rank_(segment.rank()), world_(segment.world()) {
  // Defaults measured with `shardlm bench comm --backend shm` (docs/bench/comm.md).
  one_shot_bytes_ = std::min(env_bytes("SHARDLM_SHM_ONESHOT_BYTES", size_t(64) << 10), seg_.slot_bytes());
  // Quarter-slot chunks: with a chunk the size of the slot nothing overlaps
  // (a rank copies all of it in, waits, then reduces all of it) and the
  // copies plus both ranks' reads outgrow L2; smaller chunks let one
  // rank's copy of chunk k+1 run while the other reduces chunk k, for the
  // price of one step (a wait for every peer) per chunk.
  chunk_bytes_ = std::min(env_bytes("SHARDLM_SHM_CHUNK_BYTES", seg_.slot_bytes() / 4), seg_.slot_bytes());
  chunk_bytes_ = std::max<size_t>(chunk_bytes_ / 256 * 256, 256);
}

int Collectives::step(Deadline deadline, const char* what) {
  ++step_;
  publish(seg_.step_word(rank_), step_);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    SeqWord& w = seg_.step_word(p);
    if (!seq_reached(load_acquire(w), step_))
      wait_for(w, step_, seg_.wait_spec(p, deadline, std::string(what) + " step " + std::to_string(step_)));
  }
  return int(step_ & 1);
}

void Collectives::barrier(Deadline deadline) { step(deadline, "barrier"); }

void Collectives::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op, Deadline deadline) {
  const size_t elem = reduce_elem_bytes(dtype);
  const size_t bytes = count * elem;
  if (count == 0) return;  // count is equal on all ranks: nobody steps
  auto* data = static_cast<std::byte*>(buf);
  std::vector<const void*> srcs(static_cast<size_t>(world_));

  const size_t chunk_elems = chunk_bytes_ / elem;
  if (one_shot(bytes)) {
    for (size_t first = 0; first < count; first += chunk_elems) {
      const size_t n = std::min(chunk_elems, count - first);
      const int par = int((step_ + 1) & 1);
      std::memcpy(seg_.slot(rank_, par), data + first * elem, n * elem);
      step(deadline, "all_reduce");
      for (int q = 0; q < world_; ++q) srcs[size_t(q)] = seg_.slot(q, par);
      reduce_ordered(data + first * elem, srcs, n, dtype, op);
    }
    return;
  }

  const size_t nchunks = (count + chunk_elems - 1) / chunk_elems;
  // Shares of a chunk are whole 64-byte lines so two reducers never write one.
  const size_t share_elems = ((chunk_elems + size_t(world_) - 1) / size_t(world_) + 63) / 64 * 64;
  for (size_t k = 0; k <= nchunks; ++k) {
    const int par = int((step_ + 1) & 1);
    const size_t first = k * chunk_elems;
    const size_t n = k < nchunks ? std::min(chunk_elems, count - first) : 0;
    if (n) std::memcpy(seg_.slot(rank_, par), data + first * elem, n * elem);
    step(deadline, "all_reduce");
    if (k > 0) {
      const size_t prev_first = (k - 1) * chunk_elems;
      const size_t prev_n = std::min(chunk_elems, count - prev_first);
      std::memcpy(data + prev_first * elem, seg_.result(par ^ 1), prev_n * elem);
    }
    const size_t my_from = std::min(n, size_t(rank_) * share_elems);
    const size_t my_n = std::min(n - my_from, share_elems);
    if (my_n == 0) continue;
    for (int q = 0; q < world_; ++q) srcs[size_t(q)] = seg_.slot(q, par) + my_from * elem;
    reduce_ordered(seg_.result(par) + my_from * elem, srcs, my_n, dtype, op);
  }
}

void Collectives::reduce_scatter(const void* send, void* recv, size_t count_per_rank, DType dtype, ReduceOp op,
                                 Deadline deadline) {
  const size_t elem = reduce_elem_bytes(dtype);
  if (count_per_rank == 0) return;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  // A step stages one piece of every block; the owner of each block reduces it.
  const size_t piece_elems = std::max<size_t>(seg_.slot_bytes() / size_t(world_) / elem / 16 * 16, 1);
  std::vector<const void*> srcs(static_cast<size_t>(world_));
  size_t done = 0;
  do {
    const size_t n = std::min(piece_elems, count_per_rank - done);
    const int par = int((step_ + 1) & 1);
    for (int b = 0; b < world_; ++b)
      std::memcpy(seg_.slot(rank_, par) + size_t(b) * piece_elems * elem,
                  in + (size_t(b) * count_per_rank + done) * elem, n * elem);
    step(deadline, "reduce_scatter");
    for (int q = 0; q < world_; ++q) srcs[size_t(q)] = seg_.slot(q, par) + size_t(rank_) * piece_elems * elem;
    reduce_ordered(out + done * elem, srcs, n, dtype, op);
    done += n;
  } while (done < count_per_rank);
}

void Collectives::all_gather(const void* send, void* recv, size_t bytes_per_rank, Deadline deadline) {
  if (bytes_per_rank == 0) return;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const size_t piece = seg_.slot_bytes();
  size_t done = 0;
  do {
    const size_t n = std::min(piece, bytes_per_rank - done);
    const int par = int((step_ + 1) & 1);
    std::memcpy(seg_.slot(rank_, par), in + done, n);
    step(deadline, "all_gather");
    for (int q = 0; q < world_; ++q) std::memcpy(out + size_t(q) * bytes_per_rank + done, seg_.slot(q, par), n);
    done += n;
  } while (done < bytes_per_rank);
}

void Collectives::broadcast(void* buf, size_t bytes, int root, Deadline deadline) {
  if (bytes == 0) return;
  auto* data = static_cast<std::byte*>(buf);
  const size_t piece = seg_.slot_bytes();
  size_t done = 0;
  do {
    const size_t n = std::min(piece, bytes - done);
    const int par = int((step_ + 1) & 1);
    if (rank_ == root) std::memcpy(seg_.slot(root, par), data + done, n);
    step(deadline, "broadcast");
    if (rank_ != root) std::memcpy(data + done, seg_.slot(root, par), n);
    done += n;
  } while (done < bytes);
}

}  // namespace shardlm::comm::shm
