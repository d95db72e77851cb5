#include "core/row_shares.h"

#include <algorithm>

namespace shardlm {

namespace {

// Thread ith's chunks [first, end) of `chunks` shared by n threads.
std::pair<int64_t, int64_t> share_chunks(int64_t chunks, int64_t n, int64_t ith) {
  return {chunks * ith / n, chunks * (ith + 1) / n};
}

}  // namespace

RowShares::RowShares(int64_t rows, int64_t chunk, int threads)
    : rows_(rows), chunk_(std::max<int64_t>(chunk, 1)), shares_(size_t(std::max(threads, 1))) {
  const int64_t chunks = (rows_ + chunk_ - 1) / chunk_;
  const int64_t n = int64_t(shares_.size());
  for (int64_t i = 0; i < n; ++i) {
    const auto [first, end] = share_chunks(chunks, n, i);
    shares_[size_t(i)].store(pack(uint32_t(first), uint32_t(end)), std::memory_order_relaxed);
  }
}

std::pair<int64_t, int64_t> RowShares::share(int64_t rows, int64_t chunk, int threads, int ith) {
  chunk = std::max<int64_t>(chunk, 1);
  const auto [first, end] = share_chunks((rows + chunk - 1) / chunk, std::max(threads, 1), ith);
  return {std::min(rows, first * chunk), std::min(rows, end * chunk)};
}

bool RowShares::claim(int share, bool from_front, int64_t* chunk_index) {
  std::atomic<uint64_t>& s = shares_[size_t(share)];
  uint64_t word = s.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t front = uint32_t(word), back = uint32_t(word >> 32);
    if (front >= back) return false;
    const uint64_t claimed = from_front ? pack(front + 1, back) : pack(front, back - 1);
    if (s.compare_exchange_weak(word, claimed, std::memory_order_relaxed)) {
      *chunk_index = from_front ? front : back - 1;
      return true;
    }
  }
}

bool RowShares::next(int ith, int64_t* r0, int64_t* r1) {
  const int n = int(shares_.size());
  int64_t c = 0;
  bool found = claim(ith % n, true, &c);
  for (int k = 1; !found && k < n; ++k) found = claim((ith + k) % n, false, &c);
  if (!found) return false;
  *r0 = c * chunk_;
  *r1 = std::min(rows_, *r0 + chunk_);
  return true;
}

}  // namespace shardlm
