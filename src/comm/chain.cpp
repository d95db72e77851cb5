#include <algorithm>
#include <deque>

#include "comm/algorithms.h"
#include "comm/reduce.h"

namespace shardlm::comm {

ChainAllReduce::ChainAllReduce(Links& links, void* buf, size_t count, DType dtype, ReduceOp op,
                               size_t chunk_bytes)
    : links_(links),
      buf_(static_cast<uint8_t*>(buf)),
      count_(count),
      elem_(reduce_elem_bytes(dtype)),
      chunk_elems_(std::max<size_t>(1, chunk_bytes / reduce_elem_bytes(dtype))),
      dtype_(dtype),
      op_(op) {}

void ChainAllReduce::run() {
  reduce_to_first();
  broadcast_from_first();
}

size_t ChainAllReduce::pieces() const {
  return std::max<size_t>(1, (count_ + chunk_elems_ - 1) / chunk_elems_);
}

void ChainAllReduce::piece(size_t i, size_t& off, size_t& n) const {
  off = std::min(count_, i * chunk_elems_);
  n = std::min(count_ - off, chunk_elems_);
}

// Rank k receives the partial of ranks k+1..n-1 piece by piece, a few pieces
// ahead, combines it into its own piece (own op partial, always in that
// order) and passes the piece down to k-1.
void ChainAllReduce::reduce_to_first() {
  const int me = links_.rank(), last = links_.size() - 1;
  const size_t total = pieces();
  std::vector<RequestPtr> sends;
  auto send_down = [&](size_t i) {
    size_t off, n;
    piece(i, off, n);
    sends.push_back(links_.isend(me - 1, buf_ + off * elem_, n * elem_));
  };
  if (me == last) {
    for (size_t i = 0; i < total; ++i) send_down(i);
    links_.wait(sends);
    return;
  }
  const size_t window = std::min(total, kWindow);
  const size_t slot_bytes = chunk_elems_ * elem_;
  // Pieces are combined into the buffer as they arrive where the backend
  // can (a piece goes down only once combined), else received into rotating
  // scratch slots and reduced after; the same bits either way.
  uint8_t* scratch = nullptr;
  std::deque<RequestPtr> recvs;
  auto post = [&](size_t i) {
    size_t off, n;
    piece(i, off, n);
    RequestPtr r = scratch ? nullptr : links_.irecv_reduce(me + 1, buf_ + off * elem_, n, dtype_, op_, false);
    if (!r) {
      if (!scratch) scratch = links_.scratch(window * slot_bytes);
      r = links_.irecv(me + 1, scratch + (i % window) * slot_bytes, n * elem_);
    }
    recvs.push_back(r);
  };
  for (size_t i = 0; i < window; ++i) post(i);
  for (size_t i = 0; i < total; ++i) {
    links_.wait(recvs.front());
    recvs.pop_front();
    size_t off, n;
    piece(i, off, n);
    if (scratch) reduce_into(buf_ + off * elem_, scratch + (i % window) * slot_bytes, n, dtype_, op_);
    if (i + window < total) post(i + window);
    if (me > 0) send_down(i);
  }
  links_.wait(sends);
}

// Rank 0's bits travel up the chain unchanged, so every rank ends with them.
void ChainAllReduce::broadcast_from_first() {
  const int me = links_.rank(), last = links_.size() - 1;
  const size_t total = pieces();
  std::vector<RequestPtr> sends, recvs;
  for (size_t i = 0; i < total && me > 0; ++i) {
    size_t off, n;
    piece(i, off, n);
    recvs.push_back(links_.irecv(me - 1, buf_ + off * elem_, n * elem_));
  }
  for (size_t i = 0; i < total; ++i) {
    size_t off, n;
    piece(i, off, n);
    if (me > 0) links_.wait(recvs[i]);
    if (me < last) sends.push_back(links_.isend(me + 1, buf_ + off * elem_, n * elem_));
  }
  links_.wait(sends);
}

}  // namespace shardlm::comm
