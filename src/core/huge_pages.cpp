#include "core/huge_pages.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace shardlm {

std::shared_ptr<uint8_t[]> alloc_huge_page_buffer(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes == 0) throw Error("alloc_huge_page_buffer: 0 bytes");
  const auto page = size_t(sysconf(_SC_PAGESIZE));
  const size_t size = (bytes + page - 1) / page * page;
  // Below 2 MiB no page can be huge: no alignment slack to map.
  const size_t slack = size >= kHuge ? kHuge - page : 0;
  void* map = ::mmap(nullptr, size + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    throw Error(fmt::format("cannot allocate {} bytes: {}", bytes, std::strerror(errno)));
  const auto base = reinterpret_cast<uintptr_t>(map);
  const uintptr_t start = slack ? (base + kHuge - 1) & ~(kHuge - 1) : base;
  // Unmaps the slack before and after the aligned stretch.
  if (start > base) ::munmap(map, start - base);
  if (base + slack > start) ::munmap(reinterpret_cast<void*>(start + size), base + slack - start);
  auto* p = reinterpret_cast<uint8_t*>(start);
  if (slack) ::madvise(p, size, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t[]>(p, [size](uint8_t* q) { ::munmap(q, size); });
}

}  // namespace shardlm
