// The resident memory of this process, as Linux reports it in /proc/self.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardlm {

struct MemoryUsage {
  int64_t rss_kib = -1;  // VmRSS, -1 when /proc is unavailable
  int64_t hwm_kib = -1;  // VmHWM: the peak
};
MemoryUsage read_memory_usage();

// Bytes of the pages of [p, p + n) this process has mapped now (the present
// bit of /proc/self/pagemap): for a file mapping, what counts in its RSS,
// whatever else the page cache keeps (which mincore would report). Whole
// pages, so a partial first or last page counts whole. -1 when unavailable.
int64_t mapped_resident_bytes(const void* p, size_t n);

}  // namespace shardlm
