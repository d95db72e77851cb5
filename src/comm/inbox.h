// Receive-side matching for one peer, shared by the backends (tcp, shm, mpi):
// the irecvs posted for that peer, in order, and the messages that arrived
// before their irecv. A backend reads a message's (tag, length) off its wire,
// asks arrive() where the bytes go, fills them in, and calls complete().
//
// Buffering is bounded: arrive() returns an empty Delivery when a message does
// not fit the budget, and the backend stops reading from that peer until an
// irecv is posted or buffered bytes are taken (back-pressure). A buffered
// message that an irecv claims while it is still arriving is copied into the
// irecv's buffer when it completes. A combining irecv (Transport::irecv_reduce)
// takes a message of exactly its size; a buffered one is combined into it
// instead of copied, and a backend that delivers straight into it combines
// what arrives (Delivery::combine()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>

#include "comm/reduce.h"
#include "comm/transport.h"

namespace shardlm::comm {

class Inbox {
 public:
  struct Recv;
  struct Buffered;
  // Where one arriving message goes: a posted irecv or a buffer of its own.
  struct Delivery {
    std::shared_ptr<Recv> target;
    std::shared_ptr<Buffered> stash;
    size_t len = 0;
    std::byte* data() const;
    // Non-null when the bytes must be combined into data(), not copied there.
    const Combine* combine() const;
    explicit operator bool() const { return target || stash; }
  };

  // `buffered_bytes` counts bytes buffered, shared by the inboxes that share
  // `budget` (one peer's, or the whole transport's). `peer` names the peer in
  // errors, as Transport::describe_peer does.
  Inbox(std::string peer, size_t& buffered_bytes, size_t budget)
      : peer_(std::move(peer)), buffered_bytes_(buffered_bytes), budget_(budget) {}

  // An irecv: takes the oldest buffered message with `tag` (finished at once
  // when complete, claimed while it still arrives), else waits in order.
  // With `combine`, the message must be `capacity` bytes and is combined
  // into `data`.
  RequestPtr post(int peer, uint64_t tag, void* data, size_t capacity,
                  const Combine* combine = nullptr);
  // A message starts arriving: to the oldest posted irecv with `tag`, else to
  // a new buffer; empty when the buffer budget is exhausted, unless
  // `ignore_budget` (the message is already in hand and must go somewhere).
  // Throws Error naming the peer when the message exceeds the irecv.
  Delivery arrive(uint64_t tag, size_t len, bool ignore_budget = false);
  // All of the delivery's bytes are in place; resets `d`.
  void complete(Delivery& d);

  bool has_posted() const { return !posted_.empty(); }
  // The oldest posted irecv combines (the next message is most likely its).
  bool oldest_posted_combines() const;

 private:
  void check_fits(uint64_t tag, size_t len, const Recv& r) const;
  // The buffered bytes into the receive that claimed them; finishes it.
  static void hand_over(Recv& r, const Buffered& b);

  std::string peer_;
  size_t& buffered_bytes_;
  size_t budget_;
  std::list<std::shared_ptr<Recv>> posted_;
  std::deque<std::shared_ptr<Buffered>> buffered_;
};

}  // namespace shardlm::comm
