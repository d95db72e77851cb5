#include "core/memory_usage.h"

#include <fstream>
#include <string>

namespace shardlm {

MemoryUsage read_memory_usage() {
  MemoryUsage m;
  std::ifstream in("/proc/self/status");
  std::string key;
  int64_t value;
  while (in >> key) {
    if (key == "VmRSS:" && in >> value) m.rss_kib = value;
    else if (key == "VmHWM:" && in >> value) m.hwm_kib = value;
  }
  return m;
}

}  // namespace shardlm
