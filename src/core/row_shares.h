// How the threads of a matmul divide its rows: each owns a contiguous share
// and claims it a chunk at a time from the front; a thread done with its own
// takes chunks from the back of the others'. In the common case a thread
// thus reads one unbroken stretch, which the prefetchers follow from chunk
// to chunk (claiming chunks in turn from one shared counter interleaved the
// threads' chunks, restarting each thread's stream at every chunk: on the
// AMX Xeon 1B decode at 2 threads 2-5 % slower); on a VM whose cores are
// sometimes taken away, a thread that got less CPU still does not hold the
// others at the barrier. Chunk edges are multiples of the chunk size, so
// every row is computed whole by one thread with the same tiling whoever
// takes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace shardlm {

class RowShares {
 public:
  // `rows` in chunks of `chunk` rows (the last may be short), shared among
  // `threads` threads.
  RowShares(int64_t rows, int64_t chunk, int threads);

  // The next chunk for thread `ith`: true and its rows [*r0, *r1), or false
  // when no chunk is left anywhere.
  bool next(int ith, int64_t* r0, int64_t* r1);

  // The rows [first, end) thread `ith` owns (before any are taken) when
  // `rows` are shared this way.
  static std::pair<int64_t, int64_t> share(int64_t rows, int64_t chunk, int threads, int ith);

 private:
  // A share's unclaimed chunks [front, back) packed into one word, so that
  // its owner and a thief claim from either end without a lock.
  static uint64_t pack(uint32_t front, uint32_t back) { return uint64_t(back) << 32 | front; }
  bool claim(int share, bool from_front, int64_t* chunk_index);

  int64_t rows_;
  int64_t chunk_;
  std::vector<std::atomic<uint64_t>> shares_;
};

}  // namespace shardlm
