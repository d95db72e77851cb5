#include <algorithm>

#include "comm/algorithms.h"
#include "comm/reduce.h"

namespace shardlm::comm {

Ring::Ring(Links& links, void* buf, size_t count, size_t elem_bytes, size_t chunk_bytes)
    : links_(links),
      buf_(static_cast<uint8_t*>(buf)),
      total_(count),
      elem_(elem_bytes),
      chunk_elems_(std::max<size_t>(1, chunk_bytes / elem_bytes)),
      n_(links.size()),
      me_(links.rank()) {}

size_t Ring::begin(int seg) const {
  size_t base = total_ / size_t(n_), rem = total_ % size_t(n_);
  return base * size_t(seg) + std::min(size_t(seg), rem);
}

size_t Ring::count(int seg) const {
  return total_ / size_t(n_) + (size_t(seg) < total_ % size_t(n_) ? 1 : 0);
}

template <class SendSeg, class RecvSeg>
void Ring::run_steps(int steps, int reduce_steps, SendSeg send_seg, RecvSeg recv_seg, DType dtype,
                     ReduceOp op) {
  const int left = seg_mod(me_ - 1), right = seg_mod(me_ + 1);
  // Pieces of a segment; sender and receiver cut the same segment the same way.
  auto pieces = [&](int seg) { return std::max<size_t>(1, (count(seg) + chunk_elems_ - 1) / chunk_elems_); };
  auto piece = [&](int seg, size_t i, size_t& off, size_t& n) {
    off = std::min(count(seg), i * chunk_elems_);
    n = std::min(count(seg) - off, chunk_elems_);
  };
  // A reducing step's pieces are combined into the buffer as they arrive
  // where the backend can (Transport::irecv_reduce: no scratch to write and
  // read back), else received into scratch and reduced after; the same bits.
  // Its segment is no send's: step s sends segment me-s-1, so the one
  // received at reducing step t (me-t-2) went out at step t+1-n < 0.
  const size_t max_seg = count(0) * elem_;
  uint8_t* scratch[2] = {nullptr, nullptr};
  bool combining = reduce_steps > 0;  // until the backend says it cannot

  std::vector<std::vector<RequestPtr>> sends(static_cast<size_t>(steps)), recvs(static_cast<size_t>(steps));
  auto post_recvs = [&](int step) {
    const bool reduce = step < reduce_steps;
    // Past step n-2 (an all-reduce's gathering steps) the segment received
    // straight into the buffer is the one sent n-1 steps earlier: a backend
    // may read a send's buffer until the send completes.
    if (!reduce && step >= n_ - 1) links_.wait(sends[size_t(step - (n_ - 1))]);
    int seg = recv_seg(step);
    for (size_t i = 0; i < pieces(seg); ++i) {
      size_t off, n;
      piece(seg, i, off, n);
      uint8_t* in_buf = buf_ + (begin(seg) + off) * elem_;
      RequestPtr r = reduce && combining ? links_.irecv_reduce(left, in_buf, n, dtype, op, false) : nullptr;
      if (reduce && !r) {
        combining = false;
        if (!scratch[0]) {
          scratch[0] = links_.scratch(2 * max_seg);
          scratch[1] = scratch[0] + max_seg;
        }
      }
      if (!r) r = links_.irecv(left, reduce ? scratch[step % 2] + off * elem_ : in_buf, n * elem_);
      recvs[size_t(step)].push_back(std::move(r));
    }
  };
  auto send_piece = [&](int step, int seg, size_t i) {
    size_t off, n;
    piece(seg, i, off, n);
    sends[size_t(step)].push_back(links_.isend(right, buf_ + (begin(seg) + off) * elem_, n * elem_));
  };

  post_recvs(0);
  for (size_t i = 0; i < pieces(send_seg(0)); ++i) send_piece(0, send_seg(0), i);
  for (int step = 0; step < steps; ++step) {
    if (step + 1 < steps) post_recvs(step + 1);
    int seg = recv_seg(step);
    for (size_t i = 0; i < pieces(seg); ++i) {
      links_.wait(recvs[size_t(step)][i]);
      if (step < reduce_steps && !combining) {
        size_t off, n;
        piece(seg, i, off, n);
        reduce_into(buf_ + (begin(seg) + off) * elem_, scratch[step % 2] + off * elem_, n,
                    dtype, op);
      }
      if (step + 1 < steps) send_piece(step + 1, seg, i);  // the next step sends what just arrived
    }
  }
  for (const auto& step_sends : sends) links_.wait(step_sends);
}

void Ring::reduce_scatter(DType dtype, ReduceOp op) {
  if (n_ == 1) return;
  run_steps(n_ - 1, n_ - 1, [&](int s) { return seg_mod(me_ - s - 1); },
            [&](int s) { return seg_mod(me_ - s - 2); }, dtype, op);
}

void Ring::all_gather() {
  if (n_ == 1) return;
  run_steps(n_ - 1, 0, [&](int s) { return seg_mod(me_ - s); }, [&](int s) { return seg_mod(me_ - s - 1); },
            DType::F32, ReduceOp::Sum);
}

// The all-gather's steps continue the reduce-scatter's numbering (its step s
// sends segment me-s-1 and receives me-s-2, mod n, as they do), so one run
// does both and the first reduced pieces go out while later ones are still
// being summed.
void Ring::all_reduce(DType dtype, ReduceOp op) {
  if (n_ == 1) return;
  run_steps(2 * (n_ - 1), n_ - 1, [&](int s) { return seg_mod(me_ - s - 1); },
            [&](int s) { return seg_mod(me_ - s - 2); }, dtype, op);
}

}  // namespace shardlm::comm
