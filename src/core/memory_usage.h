// The resident memory of this process, as Linux reports it in /proc/self/status.
#pragma once

#include <cstdint>

namespace shardlm {

struct MemoryUsage {
  int64_t rss_kib = -1;  // VmRSS, -1 when /proc is unavailable
  int64_t hwm_kib = -1;  // VmHWM: the peak
};
MemoryUsage read_memory_usage();

}  // namespace shardlm
