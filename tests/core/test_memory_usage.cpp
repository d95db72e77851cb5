#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include "core/memory_usage.h"

namespace shardlm {
namespace {

TEST(MappedResidentBytes, CountsThePagesTouchedAndDroppedAgain) {
  const auto page = size_t(sysconf(_SC_PAGESIZE));
  const size_t n = 8 * page;
  void* map = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  madvise(map, n, MADV_NOHUGEPAGE);  // one 4 KiB page per touch
  auto* bytes = static_cast<uint8_t*>(map);
  EXPECT_EQ(mapped_resident_bytes(bytes, n), 0);
  bytes[0] = 1;
  bytes[3 * page + 5] = 1;
  EXPECT_EQ(mapped_resident_bytes(bytes, n), int64_t(2 * page));
  EXPECT_EQ(mapped_resident_bytes(bytes + 3 * page + 7, 1), int64_t(page));  // a partial page counts whole
  EXPECT_EQ(mapped_resident_bytes(bytes + page, 2 * page), 0);
  madvise(bytes, page, MADV_DONTNEED);
  EXPECT_EQ(mapped_resident_bytes(bytes, n), int64_t(page));
  EXPECT_EQ(mapped_resident_bytes(bytes, 0), 0);
  munmap(map, n);
}

}  // namespace
}  // namespace shardlm
