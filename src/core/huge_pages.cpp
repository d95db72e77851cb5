#include "core/huge_pages.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace shardlm {

std::shared_ptr<uint8_t[]> alloc_huge_page_buffer(size_t bytes) {
  if (bytes == 0) throw Error("alloc_huge_page_buffer: 0 bytes");
  const auto page = size_t(sysconf(_SC_PAGESIZE));
  const size_t size = (bytes + page - 1) / page * page;
  // Below 2 MiB no page can be huge: no alignment slack to map.
  const size_t slack = size >= kHugePageBytes ? kHugePageBytes - page : 0;
  void* map = ::mmap(nullptr, size + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    throw Error(fmt::format("cannot allocate {} bytes: {}", bytes, std::strerror(errno)));
  const auto base = reinterpret_cast<uintptr_t>(map);
  const uintptr_t start = slack ? (base + kHugePageBytes - 1) & ~(kHugePageBytes - 1) : base;
  // Unmaps the slack before and after the aligned stretch.
  if (start > base) ::munmap(map, start - base);
  if (base + slack > start) ::munmap(reinterpret_cast<void*>(start + size), base + slack - start);
  auto* p = reinterpret_cast<uint8_t*>(start);
  if (slack) ::madvise(p, size, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t[]>(p, [size](uint8_t* q) { ::munmap(q, size); });
}

HugePageArena::HugePageArena(size_t stretch_bytes) : stretch_bytes_(stretch_bytes) {}

std::shared_ptr<uint8_t[]> HugePageArena::allocate(size_t bytes) {
  constexpr size_t kAlign = 4096;
  if (bytes == 0) throw Error("HugePageArena: 0 bytes");
  if (!stretch_ || bytes > size_ - used_) {
    size_ = (std::max(stretch_bytes_, bytes) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    stretch_ = alloc_huge_page_buffer(size_);
    used_ = 0;
  }
  // An alias of the stretch: the stretch is unmapped when its last buffer goes.
  std::shared_ptr<uint8_t[]> piece(stretch_, stretch_.get() + used_);
  used_ = std::min(size_, (used_ + bytes + kAlign - 1) / kAlign * kAlign);
  return piece;
}

}  // namespace shardlm
