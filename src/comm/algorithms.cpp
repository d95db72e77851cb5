#include "comm/algorithms.h"

#include <bit>
#include <cstring>

#include "comm/reduce.h"

namespace shardlm::comm {

void exchange_combine(Links& links, int partner, uint8_t* buf, uint8_t* tmp, size_t count, DType dtype,
                      ReduceOp op) {
  const size_t bytes = count * reduce_elem_bytes(dtype);
  const bool partner_first = partner < links.rank();
  RequestPtr reqs[2] = {links.isend(partner, buf, bytes), nullptr};
  if (reqs[0]->done()) reqs[1] = links.irecv_reduce(partner, buf, count, dtype, op, partner_first);
  if (reqs[1]) {
    links.wait(reqs);
    return;
  }
  reqs[1] = links.irecv(partner, tmp, bytes);
  links.wait(reqs);
  Combine{dtype, op, partner_first}.apply(buf, tmp, bytes);
}

void OneShotAllReduce::run() {
  const int n = links_.size(), me = links_.rank();
  const size_t bytes = count_ * reduce_elem_bytes(dtype_);
  uint8_t* others = links_.scratch(bytes * size_t(n - 1));
  if (n == 2) return exchange_combine(links_, 1 - me, buf_, others, count_, dtype_, op_);
  std::vector<RequestPtr> reqs;
  reqs.reserve(2 * size_t(n - 1));  // one allocation per call, not one per doubling
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (int k = 0, slot = 0; k < n; ++k) {
    if (k == me) {
      srcs[size_t(k)] = buf_;
      continue;
    }
    uint8_t* at = others + bytes * size_t(slot++);
    srcs[size_t(k)] = at;
    reqs.push_back(links_.irecv(k, at, bytes));
  }
  for (int k = 1; k < n; ++k) reqs.push_back(links_.isend((me + k) % n, buf_, bytes));
  links_.wait(reqs);
  reduce_ordered(buf_, srcs, count_, dtype_, op_);
}

bool fold_in(Links& links, int p, uint8_t* buf, uint8_t* tmp, size_t count, DType dtype, ReduceOp op) {
  const int me = links.rank(), extra = links.size() - p;
  const size_t bytes = count * reduce_elem_bytes(dtype);
  if (me >= p) {  // fold in, then wait for the answer
    links.wait(links.isend(me - p, buf, bytes));
    links.wait(links.irecv(me - p, buf, bytes));
    return false;
  }
  if (me < extra) {  // the folded (higher) rank's data comes second
    if (RequestPtr r = links.irecv_reduce(me + p, buf, count, dtype, op, false)) {
      links.wait(r);
    } else {
      links.wait(links.irecv(me + p, tmp, bytes));
      reduce_into(buf, tmp, count, dtype, op);
    }
  }
  return true;
}

void fold_out(Links& links, int p, const uint8_t* buf, size_t bytes) {
  if (links.rank() < links.size() - p) links.wait(links.isend(links.rank() + p, buf, bytes));
}

void RecursiveDoublingAllReduce::run() {
  const int me = links_.rank(), p = int(std::bit_floor(unsigned(links_.size())));
  uint8_t* tmp = links_.scratch(count_ * reduce_elem_bytes(dtype_));
  if (!fold_in(links_, p, buf_, tmp, count_, dtype_, op_)) return;
  for (int mask = 1; mask < p; mask <<= 1)
    exchange_combine(links_, me ^ mask, buf_, tmp, count_, dtype_, op_);
  fold_out(links_, p, buf_, count_ * reduce_elem_bytes(dtype_));
}

void all_gather_direct(Links& links, const void* send, void* recv, size_t bytes) {
  const int n = links.size(), me = links.rank();
  auto* out = static_cast<uint8_t*>(recv);
  std::vector<RequestPtr> reqs;
  for (int k = 0; k < n; ++k)
    if (k != me) reqs.push_back(links.irecv(k, out + bytes * size_t(k), bytes));
  for (int k = 1; k < n; ++k) reqs.push_back(links.isend((me + k) % n, send, bytes));
  if (bytes) std::memmove(out + bytes * size_t(me), send, bytes);
  links.wait(reqs);
}

void broadcast_direct(Links& links, void* buf, size_t bytes, int root) {
  const int n = links.size(), me = links.rank();
  if (me != root) {
    links.wait(links.irecv(root, buf, bytes));
    return;
  }
  std::vector<RequestPtr> reqs;
  for (int k = 1; k < n; ++k) reqs.push_back(links.isend((me + k) % n, buf, bytes));
  links.wait(reqs);
}

void broadcast_scatter_ring(Links& links, void* buf, size_t bytes, int root, size_t chunk_bytes) {
  const int n = links.size(), me = links.rank();
  auto* b = static_cast<uint8_t*>(buf);
  Ring ring(links, buf, bytes, 1, chunk_bytes);
  if (me == root) {
    std::vector<RequestPtr> reqs;
    for (int k = 0; k < n; ++k)
      if (k != me) reqs.push_back(links.isend(k, b + ring.begin(k), ring.count(k)));
    links.wait(reqs);
  } else {
    links.wait(links.irecv(root, b + ring.begin(me), ring.count(me)));
  }
  ring.all_gather();
}

void reduce_scatter_direct(Links& links, const void* send, void* recv, size_t count,
                           DType dtype, ReduceOp op) {
  const int n = links.size(), me = links.rank();
  const size_t bytes = count * reduce_elem_bytes(dtype);
  auto* in = static_cast<const uint8_t*>(send);
  uint8_t* others = links.scratch(bytes * size_t(n - 1));
  std::vector<RequestPtr> reqs;
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (int k = 0, slot = 0; k < n; ++k) {
    if (k == me) {
      srcs[size_t(k)] = in + bytes * size_t(me);
      continue;
    }
    uint8_t* at = others + bytes * size_t(slot++);
    srcs[size_t(k)] = at;
    reqs.push_back(links.irecv(k, at, bytes));
  }
  for (int k = 1; k < n; ++k) {
    int to = (me + k) % n;
    reqs.push_back(links.isend(to, in + bytes * size_t(to), bytes));
  }
  links.wait(reqs);
  reduce_ordered(recv, srcs, count, dtype, op);
}

void barrier_direct(Links& links) {
  const int n = links.size(), me = links.rank();
  std::vector<RequestPtr> reqs;
  for (int k = 0; k < n; ++k)
    if (k != me) reqs.push_back(links.irecv(k, nullptr, 0));
  for (int k = 1; k < n; ++k) reqs.push_back(links.isend((me + k) % n, nullptr, 0));
  links.wait(reqs);
}

}  // namespace shardlm::comm
