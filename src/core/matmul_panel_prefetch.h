// What a thread streaming a Panels16 matrix prefetches in software, shared by
// the AVX-512 / AMX panel sources (matmul_gemm.h's PanelGroup) and the AVX2
// panel kernels (matmul_panels_avx2.cpp). Consecutive groups are consecutive
// bytes, so a thread's rows are one stream, read a block at a time by the
// same load instructions, each stepping one block. What the core's
// prefetchers follow of that stream decides what is prefetched in software
// (docs/bench/dec5.md, measured on Zen 5):
// - one token (decode, `tokens` 1) of the 32-element types, blocks of
//   288-544 bytes a group: the stride prefetchers fetch the stream but stop
//   at each 4 KiB page, so only the first lines of each page are
//   prefetched. A prefetch of every line on top of the hardware's made
//   Q4_0 / Q8_0 decode from DRAM 1.4-1.8x slower at 1 and 2 threads
//   (presumably fill buffers taken twice for the same lines; the AVX2
//   kernels measured the same).
// - 2-8 tokens of the 32-element types (batched decode): the page starts
//   into L1 as for one token, and every line into L2 (prefetcht1). From
//   DRAM (Q4_0 128256 x 2048, 1 thread) that took 2-4 tokens 14-23 % and 8
//   tokens ~10 % below either every line into L1 or page starts alone;
//   every line into L2 alone was slower still (docs/bench/bat7.md).
// - the K-quants (2304-3360 bytes a block: too long a stride to be
//   followed; without prefetches Q4_K streamed at half the speed), and the
//   panels unpacked for a tile of many tokens: every line into L1.
// kAhead bytes ahead of the block being read (past the group's end too:
// prefetches do not fault): at least one DRAM latency (~100-150 ns) times
// what one core streams (30-60 GB/s here, less on the Xeon): ~4-9 KB. 8 KB
// was best here (2 KB: K-quants 10-20 % slower); on the Xeon 2 KB to 2 Q4_K
// super-blocks measured the same (kq8.md), so a longer distance costs
// nothing there. Included only from ISA kernel files; internal linkage (see
// matmul_avx2_common.h).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace shardlm::matmul_impl {
namespace {

class PanelPrefetch {
 public:
  // `block_bytes`: a block of the 16 rows; `tokens`: the pass's token count
  // (0: a panel unpacked for a tile of many).
  PanelPrefetch(size_t block_bytes, int tokens)
      : block_bytes_(block_bytes),
        page_starts_(tokens >= 1 && block_bytes < kStrideLimit),
        lines_to_l2_(page_starts_ && tokens >= 2) {}

  // Before reading the block at p.
  inline __attribute__((always_inline)) void ahead_of(const uint8_t* p) const {
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kAhead;  // may be past the matrix: no pointer to it
    if (!page_starts_) {
      for (size_t line = 0; line < block_bytes_; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
      return;
    }
    if (lines_to_l2_) {
      for (size_t line = 0; line < block_bytes_; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T1);
    }
    // The page starting in [ahead, ahead + block_bytes_), if any: each page
    // start falls in exactly one block's range.
    const uintptr_t page = (ahead + block_bytes_ - 1) & ~uintptr_t(kPage - 1);
    if (page >= ahead) {
      _mm_prefetch(reinterpret_cast<const char*>(page), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(page + 64), _MM_HINT_T0);
    }
  }

 private:
  static constexpr size_t kAhead = 8192, kPage = 4096, kStrideLimit = 2048;
  size_t block_bytes_;
  bool page_starts_;  // else every line into L1
  bool lines_to_l2_;  // and every line into L2
};

}  // namespace
}  // namespace shardlm::matmul_impl
