// The Communicator's collectives: pick an algorithm (or the backend's fast
// path) and run it under the world's lock.
#include <algorithm>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "comm/algorithms.h"
#include "comm/communicator.h"
#include "comm/world_state.h"
#include "comm/reduce.h"
#include "comm/tuning.h"
#include "core/error.h"

namespace shardlm::comm {
namespace {

// Each runs one collective inside WorldState::run (called with a lambda that
// captures by reference: no std::function, no copy of the group per call,
// which cost an allocation or two per all-reduce).
void run_all_reduce(WorldState* e, const Group& g, uint64_t tag, void* buf, size_t count, DType dtype,
                    ReduceOp op, AllReduceChoice choice, bool loopback) {
  if (g.size() == 1 || count == 0) return;
  Deadline d = e->deadline();
  AllReduceChoice c = choice;
  if (c.algo == AllReduceAlgo::Native || c.algo == AllReduceAlgo::Auto) {
    if (e->config().allow_fast_paths && e->transport().all_reduce(g, buf, count, dtype, op, d))
      return;
    c = sized_all_reduce(e->config(), g.size(), loopback, count * reduce_elem_bytes(dtype));
  }
  const size_t chunk = c.chunk_bytes ? c.chunk_bytes : e->config().ring_chunk_bytes;
  Links links(e->transport(), g, tag, d, e->scratch());
  switch (c.algo) {
    case AllReduceAlgo::OneShot: OneShotAllReduce(links, buf, count, dtype, op).run(); break;
    case AllReduceAlgo::RecursiveDoubling:
      RecursiveDoublingAllReduce(links, buf, count, dtype, op).run();
      break;
    case AllReduceAlgo::Chain: ChainAllReduce(links, buf, count, dtype, op, chunk).run(); break;
    case AllReduceAlgo::HalvingDoubling: HalvingDoublingAllReduce(links, buf, count, dtype, op).run(); break;
    default: Ring(links, buf, count, reduce_elem_bytes(dtype), chunk).all_reduce(dtype, op);
  }
}

void run_all_gather(WorldState* e, const Group& g, uint64_t tag, const void* send, void* recv,
                    size_t bytes) {
  if (g.size() == 1) {
    if (bytes) std::memmove(recv, send, bytes);
    return;
  }
  Deadline d = e->deadline();
  if (e->config().allow_fast_paths && e->transport().all_gather(g, send, recv, bytes, d)) return;
  Links links(e->transport(), g, tag, d, e->scratch());
  all_gather_direct(links, send, recv, bytes);
}

void run_reduce_scatter(WorldState* e, const Group& g, uint64_t tag, const void* send, void* recv,
                        size_t count, DType dtype, ReduceOp op) {
  const size_t elem = reduce_elem_bytes(dtype), bytes = count * elem;
  if (g.size() == 1) {
    if (bytes) std::memmove(recv, send, bytes);
    return;
  }
  Deadline d = e->deadline();
  if (e->config().allow_fast_paths &&
      e->transport().reduce_scatter(g, send, recv, count, dtype, op, d))
    return;
  Links links(e->transport(), g, tag, d, e->scratch());
  if (bytes * size_t(g.size()) < e->config().ring_from_bytes) {
    reduce_scatter_direct(links, send, recv, count, dtype, op);
    return;
  }
  // The ring reduces in place, so it works on a copy of the whole input.
  const size_t total = bytes * size_t(g.size());
  std::unique_ptr<uint8_t[]> work(new uint8_t[total]);
  std::memcpy(work.get(), send, total);
  Ring ring(links, work.get(), count * size_t(g.size()), elem, e->config().ring_chunk_bytes);
  ring.reduce_scatter(dtype, op);
  std::memcpy(recv, work.get() + bytes * size_t(g.my_index), bytes);
}

void run_broadcast(WorldState* e, const Group& g, uint64_t tag, void* buf, size_t bytes, int root) {
  if (g.size() == 1) return;
  Deadline d = e->deadline();
  if (e->config().allow_fast_paths && e->transport().broadcast(g, buf, bytes, root, d)) return;
  Links links(e->transport(), g, tag, d, e->scratch());
  if (g.size() > 2 && bytes >= e->config().ring_from_bytes)
    broadcast_scatter_ring(links, buf, bytes, root, e->config().ring_chunk_bytes);
  else
    broadcast_direct(links, buf, bytes, root);
}

void run_barrier(WorldState* e, const Group& g, uint64_t tag) {
  if (g.size() == 1) return;
  Deadline d = e->deadline();
  if (e->config().allow_fast_paths && e->transport().barrier(g, d)) return;
  Links links(e->transport(), g, tag, d, e->scratch());
  barrier_direct(links);
}

void check_root(const Group& g, int root) {
  if (root < 0 || root >= g.size())
    throw Error(fmt::format("comm: broadcast root {} out of range (size {})", root, g.size()));
}

}  // namespace

void Communicator::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  all_reduce(buf, count, dtype, op, choose_all_reduce_choice(count * reduce_elem_bytes(dtype)));
}

void Communicator::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op,
                              AllReduceChoice choice) {
  reduce_elem_bytes(dtype);
  const uint64_t tag = next_collective_tag();
  const bool loopback = loopback_links();
  world_->run([&] { run_all_reduce(world_.get(), group_, tag, buf, count, dtype, op, choice, loopback); });
}

void Communicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  const uint64_t tag = next_collective_tag();
  world_->run([&] { run_all_gather(world_.get(), group_, tag, send, recv, bytes_per_rank); });
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                  ReduceOp op) {
  reduce_elem_bytes(dtype);
  const uint64_t tag = next_collective_tag();
  world_->run([&] { run_reduce_scatter(world_.get(), group_, tag, send, recv, count, dtype, op); });
}

void Communicator::broadcast(void* buf, size_t bytes, int root) {
  check_root(group_, root);
  const uint64_t tag = next_collective_tag();
  world_->run([&] { run_broadcast(world_.get(), group_, tag, buf, bytes, root); });
}

void Communicator::barrier() {
  const uint64_t tag = next_collective_tag();
  world_->run([&] { run_barrier(world_.get(), group_, tag); });
}

}  // namespace shardlm::comm
