#include "core/memory_usage.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

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

int64_t mapped_resident_bytes(const void* p, size_t n) {
  if (n == 0) return 0;
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) / page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page;
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  constexpr uint64_t present = uint64_t(1) << 63;
  std::vector<uint64_t> entries(4096);
  int64_t pages = 0;
  for (uintptr_t at = first; at < end;) {
    const size_t want = std::min<size_t>(entries.size(), end - at);
    const ssize_t got = ::pread(fd, entries.data(), want * sizeof(uint64_t), off_t(at * sizeof(uint64_t)));
    if (got <= 0 || got % ssize_t(sizeof(uint64_t)) != 0) {
      ::close(fd);
      return -1;
    }
    const size_t read = size_t(got) / sizeof(uint64_t);
    for (size_t i = 0; i < read; ++i) pages += (entries[i] & present) != 0;
    at += read;
  }
  ::close(fd);
  return pages * int64_t(page);
}

}  // namespace shardlm
