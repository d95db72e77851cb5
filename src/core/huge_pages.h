// Memory for large buffers that kernels stream from (the weight copies a
// model makes at load), backed by 2 MiB pages where the OS grants them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace shardlm {

// `bytes` of zeroed memory (bytes > 0), its 2 MiB-aligned stretches offered
// to the kernel as transparent huge pages (madvise(MADV_HUGEPAGE): the
// request Linux's default "madvise" mode waits for; refused silently where
// THP is off). Streaming weights through 4 KiB pages walks the page tables
// every 4 KiB, which costs decode time that 2 MiB pages save. Nothing is
// rounded up to 2 MiB, so memory stays `bytes` (plus under a 4 KiB page).
// Throws Error naming the size when the memory cannot be had.
std::shared_ptr<uint8_t[]> alloc_huge_page_buffer(size_t bytes);

}  // namespace shardlm
