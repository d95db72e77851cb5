// Single-producer single-consumer byte queue (a circular buffer) in shared memory, one per ordered
// pair of ranks. head counts bytes ever written, tail bytes ever consumed
// (both mod 2^32, capacity a power of two), so fullness is head - tail and no
// lock is needed. Each side waits on the other's word (seq_wait.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/shm/seq_wait.h"  // SeqWord

namespace shardlm::comm::shm {

struct ByteQueueCtl {
  SeqWord head;  // advanced by the writer
  SeqWord tail;  // advanced by the reader
};

struct ByteQueue {
  ByteQueueCtl* ctl = nullptr;
  std::byte* data = nullptr;
  uint32_t capacity = 0;  // power of two

  // Move as much as fits / is there now (possibly 0) and publish it; never
  // wait. The caller rings the peer's doorbell when something moved.
  size_t write_some(const void* src, size_t bytes);
  size_t read_some(void* dst, size_t bytes);
  uint32_t readable() const;
  uint32_t writable() const;
};

}  // namespace shardlm::comm::shm
