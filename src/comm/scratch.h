// Working memory of the collective algorithms (received pieces waiting to be
// summed), kept by the world between calls. A fresh buffer per call costs a
// page fault and a zeroed page per 4 KiB on first touch whenever malloc hands
// out new pages (always above its mmap threshold): about as much CPU as
// moving the bytes over loopback TCP. Grows to the largest request and stays;
// one user at a time (the world's lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace shardlm::comm {

class Scratch {
 public:
  // At least `bytes` (never null); valid until the next take().
  uint8_t* take(size_t bytes) {
    if (bytes > capacity_ || !buf_) {
      capacity_ = bytes > 0 ? bytes : 1;
      buf_.reset(new uint8_t[capacity_]);
    }
    return buf_.get();
  }

 private:
  std::unique_ptr<uint8_t[]> buf_;
  size_t capacity_ = 0;
};

}  // namespace shardlm::comm
