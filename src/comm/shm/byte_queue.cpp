#include "comm/shm/byte_queue.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace shardlm::comm::shm {
namespace {

uint32_t own(const SeqWord& w) {  // our own word: nobody else writes it
  return std::atomic_ref<const uint32_t>(w.seq).load(std::memory_order_relaxed);
}

}  // namespace

size_t ByteQueue::write_some(const void* src, size_t bytes) {
  const uint32_t head = own(ctl->head);
  const uint32_t space = capacity - (head - load_acquire(ctl->tail));
  const uint32_t n = uint32_t(std::min<size_t>(bytes, space));
  if (n == 0) return 0;
  const auto* in = static_cast<const std::byte*>(src);
  const uint32_t at = head & (capacity - 1);
  const uint32_t first = std::min(n, capacity - at);
  std::memcpy(data + at, in, first);
  std::memcpy(data, in + first, n - first);
  publish(ctl->head, head + n);
  return n;
}

size_t ByteQueue::read_some(void* dst, size_t bytes) {
  const uint32_t tail = own(ctl->tail);
  const uint32_t n = uint32_t(std::min<size_t>(bytes, load_acquire(ctl->head) - tail));
  if (n == 0) return 0;
  auto* out = static_cast<std::byte*>(dst);
  const uint32_t at = tail & (capacity - 1);
  const uint32_t first = std::min(n, capacity - at);
  std::memcpy(out, data + at, first);
  std::memcpy(out + first, data, n - first);
  publish(ctl->tail, tail + n);
  return n;
}

uint32_t ByteQueue::readable() const { return load_acquire(ctl->head) - own(ctl->tail); }

uint32_t ByteQueue::writable() const { return capacity - (own(ctl->head) - load_acquire(ctl->tail)); }

}  // namespace shardlm::comm::shm
