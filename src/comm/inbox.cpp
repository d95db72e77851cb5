#include "comm/inbox.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"

namespace shardlm::comm {

struct Inbox::Recv : Request {
  Recv(int peer, uint64_t tag, void* d, size_t cap, const Combine* c)
      : Request(peer, tag, false), data(static_cast<std::byte*>(d)), capacity(cap) {
    if (c) combine = *c;
  }
  std::byte* data;
  size_t capacity;
  std::optional<Combine> combine;
};

struct Inbox::Buffered {
  uint64_t tag = 0;
  std::unique_ptr<std::byte[]> data;
  size_t len = 0;
  bool complete = false;
  std::shared_ptr<Recv> claimed;
};

std::byte* Inbox::Delivery::data() const { return target ? target->data : stash ? stash->data.get() : nullptr; }

const Combine* Inbox::Delivery::combine() const {
  return target && target->combine ? &*target->combine : nullptr;
}

void Inbox::check_fits(uint64_t tag, size_t len, const Recv& r) const {
  if (len > r.capacity)
    throw Error(fmt::format("{}: message of {} bytes (tag {:#x}) exceeds the receive buffer of {} bytes", peer_,
                            len, tag, r.capacity));
  if (r.combine && len != r.capacity)
    throw Error(fmt::format("{}: message of {} bytes (tag {:#x}) to reduce into {} bytes: lengths differ",
                            peer_, len, tag, r.capacity));
}

void Inbox::hand_over(Recv& r, const Buffered& b) {
  if (r.combine) r.combine->apply(r.data, b.data.get(), b.len);
  else if (b.len) std::memcpy(r.data, b.data.get(), b.len);
  r.finish(b.len);
}

RequestPtr Inbox::post(int peer, uint64_t tag, void* data, size_t capacity, const Combine* combine) {
  if (combine && capacity % combine->elem_bytes() != 0)
    throw Error(fmt::format("{}: cannot reduce into {} bytes of {}", peer_, capacity, dtype_name(combine->dtype)));
  auto r = std::make_shared<Recv>(peer, tag, data, capacity, combine);
  for (auto it = buffered_.begin(); it != buffered_.end(); ++it) {
    Buffered& b = **it;
    if (b.tag != tag || b.claimed) continue;
    check_fits(tag, b.len, *r);
    if (!b.complete) {
      b.claimed = r;
      return r;
    }
    hand_over(*r, b);
    buffered_bytes_ -= b.len;
    buffered_.erase(it);
    return r;
  }
  posted_.push_back(r);
  return r;
}

bool Inbox::oldest_posted_combines() const { return !posted_.empty() && posted_.front()->combine; }

Inbox::Delivery Inbox::arrive(uint64_t tag, size_t len, bool ignore_budget) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if ((*it)->tag() != tag) continue;
    check_fits(tag, len, **it);
    Delivery d{*it, nullptr, len};
    posted_.erase(it);
    return d;
  }
  if (!ignore_budget && len > 0 && buffered_bytes_ + len > budget_) return {};
  auto b = std::make_shared<Buffered>();
  b->tag = tag;
  b->len = len;
  if (len) b->data.reset(new std::byte[len]);
  buffered_bytes_ += len;
  buffered_.push_back(b);
  return {nullptr, std::move(b), len};
}

void Inbox::complete(Delivery& d) {
  if (d.target) {
    d.target->finish(d.len);
  } else if (d.stash->claimed) {
    hand_over(*d.stash->claimed, *d.stash);
    buffered_bytes_ -= d.len;
    buffered_.erase(std::find(buffered_.begin(), buffered_.end(), d.stash));
  } else {
    d.stash->complete = true;
  }
  d = {};
}

}  // namespace shardlm::comm
