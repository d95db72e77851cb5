// Collective algorithms, written once over a Transport's point-to-point
// links (gloo style: one class per algorithm). All run on the calling thread
// for one group, one tag and one deadline, and produce bit-identical results
// on every member (see communicator.h).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/scratch.h"
#include "comm/transport.h"

namespace shardlm::comm {

// A group's view of the transport for one collective: group ranks, one tag,
// and the world's scratch memory (one take() per algorithm run).
class Links {
 public:
  Links(Transport& t, const Group& g, uint64_t tag, Deadline deadline, Scratch& scratch)
      : t_(t), g_(g), tag_(tag), deadline_(deadline), scratch_(scratch) {}
  int rank() const { return g_.my_index; }
  int size() const { return g_.size(); }
  RequestPtr isend(int peer, const void* data, size_t bytes) {
    return t_.isend(g_.ranks[size_t(peer)], tag_, data, bytes);
  }
  RequestPtr irecv(int peer, void* data, size_t bytes) {
    return t_.irecv(g_.ranks[size_t(peer)], tag_, data, bytes);
  }
  // nullptr when the backend has no combining receive.
  RequestPtr irecv_reduce(int peer, void* acc, size_t count, DType dtype, ReduceOp op,
                          bool message_first) {
    return t_.irecv_reduce(g_.ranks[size_t(peer)], tag_, acc, count, dtype, op, message_first);
  }
  void wait(std::span<const RequestPtr> rs) { t_.wait_all(rs, deadline_); }
  void wait(const RequestPtr& r) { t_.wait_all(std::span<const RequestPtr>(&r, 1), deadline_); }
  uint8_t* scratch(size_t bytes) { return scratch_.take(bytes); }

 private:
  Transport& t_;
  const Group& g_;
  uint64_t tag_;
  Deadline deadline_;
  Scratch& scratch_;
};

// Sends buf to `partner` and combines the partner's buf into it, the lower
// rank's operand first, so both partners compute the same bits. When the
// send has already left (buf is free again) and the backend can, the
// partner's bytes are summed as they arrive (Transport::irecv_reduce);
// otherwise they land in `tmp` (bytes of buf) and are summed after. Either
// way the same bits.
void exchange_combine(Links& links, int partner, uint8_t* buf, uint8_t* tmp, size_t count, DType dtype,
                      ReduceOp op);

// What the whole-buffer all-reduces below hold: a group's links and the
// buffer they reduce in place.
class InPlaceAllReduce {
 public:
  InPlaceAllReduce(Links& links, void* buf, size_t count, DType dtype, ReduceOp op)
      : links_(links), buf_(static_cast<uint8_t*>(buf)), count_(count), dtype_(dtype), op_(op) {}

 protected:
  Links& links_;
  uint8_t* buf_;
  size_t count_;
  DType dtype_;
  ReduceOp op_;
};

// Everyone sends its whole buffer to everyone and sums in rank order 0..n-1:
// one round trip, (n-1)x the bytes. For small messages. At 2 ranks it is
// one exchange_combine.
class OneShotAllReduce : InPlaceAllReduce {
 public:
  using InPlaceAllReduce::InPlaceAllReduce;
  void run();
};

// log2(n) pairwise exchanges; the lower rank's partial always comes first in
// each combine, so both partners compute the same bits. Non-power-of-two
// sizes fold the extra ranks into the first ones before and after.
class RecursiveDoublingAllReduce : InPlaceAllReduce {
 public:
  using InPlaceAllReduce::InPlaceAllReduce;
  void run();
};

// Recursive halving, then recursive doubling (Rabenseifner's all-reduce):
// log2(p) exchanges of halves that leave each rank one p-th of the buffer
// combined (the lower rank's partial first), then log2(p) exchanges that
// swap the finished parts back in reverse: a ring's 2(p-1)/p of the buffer
// per rank in 2 log2(p) steps instead of 2(p-1), which pays where each step
// costs a wake-up (ranks sharing cores). Every rank gets the same bits:
// first f(r) op f(r + p/2) for each r < p/2, then those partials paired at
// distance p/4, and so on down to distance 1, the lower rank's partial
// first (f(r): rank r's buffer, then rank r+p's where n > p folds it in).
class HalvingDoublingAllReduce : InPlaceAllReduce {
 public:
  using InPlaceAllReduce::InPlaceAllReduce;
  void run();
};

// Groups whose size n is not a power of two, before and after an algorithm
// for the first p ranks: rank p+k hands its buffer to rank k, which combines
// it in (the folded rank's data second) and later sends the result back
// (fold_out). fold_in returns false on a folded rank, whose buf then holds
// the result. `tmp`: bytes of buf, for backends without a combining receive.
bool fold_in(Links& links, int p, uint8_t* buf, uint8_t* tmp, size_t count, DType dtype, ReduceOp op);
void fold_out(Links& links, int p, const uint8_t* buf, size_t bytes);

// Ring over n segments (segment s = elements [begin(s), begin(s)+count(s))):
// reduce_scatter leaves the fully reduced segment r on rank r (summed by r in
// ring order, f16/bf16 rounded at every hop); all_gather then copies every
// owner's bits around. Each step is cut into pieces of at most chunk_bytes and
// a piece is forwarded as soon as it arrived/was reduced, so sending,
// receiving and reducing overlap. all_reduce() is reduce_scatter() then
// all_gather() (the same bits) without the pause between them.
class Ring {
 public:
  Ring(Links& links, void* buf, size_t count, size_t elem_bytes, size_t chunk_bytes);
  void reduce_scatter(DType dtype, ReduceOp op);
  void all_gather();
  void all_reduce(DType dtype, ReduceOp op);
  size_t begin(int seg) const;
  size_t count(int seg) const;

 private:
  int seg_mod(int s) const { return ((s % n_) + n_) % n_; }
  // Runs `steps` steps; at step s send segment send_seg(s), receive
  // recv_seg(s), and reduce what arrives into it while s < reduce_steps.
  template <class SendSeg, class RecvSeg>
  void run_steps(int steps, int reduce_steps, SendSeg send_seg, RecvSeg recv_seg, DType dtype,
                 ReduceOp op);

  Links& links_;
  uint8_t* buf_;
  size_t total_;
  size_t elem_;
  size_t chunk_elems_;
  int n_, me_;
};

// A chain reduce to rank 0 (rank k adds what k+1 passed down and passes it
// on), then a chain broadcast back up, both cut into pieces and pipelined.
// Each link moves the whole buffer twice (a ring moves 2(n-1)/n of it), but
// one way at a time. That pays where a link's two directions are served by
// the same CPUs (TCP over loopback: both directions at once move far less
// than twice one direction), not on a real full-duplex wire. All ranks get
// rank 0's bits.
class ChainAllReduce {
 public:
  ChainAllReduce(Links& links, void* buf, size_t count, DType dtype, ReduceOp op,
                 size_t chunk_bytes);
  void run();

 private:
  static constexpr size_t kWindow = 4;  // pieces received ahead
  size_t pieces() const;
  void piece(size_t i, size_t& off, size_t& n) const;
  void reduce_to_first();
  void broadcast_from_first();

  Links& links_;
  uint8_t* buf_;
  size_t count_;
  size_t elem_;
  size_t chunk_elems_;
  DType dtype_;
  ReduceOp op_;
};

// recv = n blocks of `bytes` each, block i from rank i; direct exchange.
void all_gather_direct(Links& links, const void* send, void* recv, size_t bytes);
// The root sends to everyone (small), or scatters and ring-all-gathers (large).
void broadcast_direct(Links& links, void* buf, size_t bytes, int root);
void broadcast_scatter_ring(Links& links, void* buf, size_t bytes, int root, size_t chunk_bytes);
// Every rank sends block j to rank j and sums what it gets in rank order.
void reduce_scatter_direct(Links& links, const void* send, void* recv, size_t count,
                           DType dtype, ReduceOp op);
void barrier_direct(Links& links);

}  // namespace shardlm::comm
