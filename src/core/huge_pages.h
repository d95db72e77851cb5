// Memory for large buffers that kernels stream from (the weight copies a
// model makes at load), backed by 2 MiB pages where the OS grants them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace shardlm {

constexpr size_t kHugePageBytes = size_t(2) << 20;  // the transparent huge page size on x86-64

// `bytes` of zeroed memory (bytes > 0), its 2 MiB-aligned stretches offered
// to the kernel as transparent huge pages (madvise(MADV_HUGEPAGE): the
// request Linux's default "madvise" mode waits for; refused silently where
// THP is off). Streaming weights through 4 KiB pages walks the page tables
// every 4 KiB, which costs decode time that 2 MiB pages save. Nothing is
// rounded up to 2 MiB, so memory stays `bytes` (plus under a 4 KiB page).
// Throws Error naming the size when the memory cannot be had.
std::shared_ptr<uint8_t[]> alloc_huge_page_buffer(size_t bytes);

// Buffers carved back to back out of stretches of 2 MiB pages, for many
// copies that live about as long as each other (a model's weight copies). A
// buffer of its own each leaves a matrix's bytes past its last 2 MiB
// boundary (all of a matrix under 2 MiB) on 4 KiB pages: 12 % of 1B Q4_0's
// weights, and 2048x2048 Q4_K matrices streamed 11 % (1 thread) to 18 % (2)
// slower that way than on 2 MiB pages (docs/BENCHMARKS.md). Each stretch is
// a multiple of 2 MiB; what one has left when the next buffer does not fit
// is never touched, so it takes address space but memory only up to the end
// of the 2 MiB page the last buffer ended in. Not thread-safe.
class HugePageArena {
 public:
  static constexpr size_t kDefaultStretch = size_t(256) << 20;
  // Stretches of at least `stretch_bytes`.
  explicit HugePageArena(size_t stretch_bytes = kDefaultStretch);
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // `bytes` (> 0) of zeroed memory starting on a 4 KiB boundary; holding it
  // keeps its stretch mapped. Throws Error as alloc_huge_page_buffer does.
  std::shared_ptr<uint8_t[]> allocate(size_t bytes);

 private:
  size_t stretch_bytes_;
  std::shared_ptr<uint8_t[]> stretch_;
  size_t size_ = 0;
  size_t used_ = 0;
};

}  // namespace shardlm
