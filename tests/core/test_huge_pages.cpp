#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/huge_pages.h"

namespace shardlm {
namespace {

// The VmFlags line of the mapping holding `p` in /proc/self/smaps ("" if none).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(HugePageBuffer, LargeBuffersStartOnA2MiBBoundaryAndAskForHugePages) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t n = 5 * kHuge + 123;
  const auto buf = alloc_huge_page_buffer(n);
  ASSERT_NE(buf.get(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.get()) % kHuge, 0u);
  EXPECT_EQ(buf[0], 0);
  EXPECT_EQ(buf[n - 1], 0);
  buf[0] = 1;
  buf[n - 1] = 2;
  EXPECT_EQ(buf[0] + buf[n - 1], 3);
  if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good()) {
    EXPECT_NE(vm_flags_of(buf.get()).find(" hg"), std::string::npos) << vm_flags_of(buf.get());
  }
}

TEST(HugePageBuffer, SmallBuffersAreOrdinaryPages) {
  const auto buf = alloc_huge_page_buffer(100);
  ASSERT_NE(buf.get(), nullptr);
  buf[99] = 7;
  EXPECT_EQ(buf[99], 7);
  EXPECT_EQ(buf[0], 0);
}

TEST(HugePageBuffer, ZeroBytesIsAnError) { EXPECT_THROW(alloc_huge_page_buffer(0), Error); }

// Buffers follow each other on 4 KiB boundaries inside a 2 MiB-aligned
// stretch that asks for huge pages; one that does not fit what is left
// starts the next stretch, and a buffer larger than a stretch gets one of
// its own size.
TEST(HugePageArena, CarvesZeroedBuffersBackToBackOutOfHugePageStretches) {
  constexpr size_t kHuge = size_t(2) << 20;
  HugePageArena arena(4 * kHuge);
  const auto a = arena.allocate(kHuge + 100);
  const auto b = arena.allocate(5000);
  const auto base = reinterpret_cast<uintptr_t>(a.get());
  EXPECT_EQ(base % kHuge, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()), base + kHuge + 4096);
  if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good()) {
    EXPECT_NE(vm_flags_of(b.get()).find(" hg"), std::string::npos) << vm_flags_of(b.get());
  }
  const auto c = arena.allocate(3 * kHuge);  // 2 MiB + 12 KiB of 8 MiB taken: a new stretch
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.get()) % kHuge, 0u);
  EXPECT_NE(reinterpret_cast<uintptr_t>(c.get()), base + kHuge + 12288);
  const auto d = arena.allocate(9 * kHuge + 1);  // larger than a stretch
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d.get()) % kHuge, 0u);
  for (const auto* buf : {&a, &b, &c, &d}) EXPECT_EQ((*buf)[0], 0);
  EXPECT_EQ(d[9 * kHuge], 0);
  a[kHuge + 99] = 1;
  b[0] = 2;
  b[4999] = 3;
  EXPECT_EQ(a[kHuge + 99] + b[0] + b[4999], 6);
}

// A buffer keeps its stretch mapped after the arena and the stretch's other
// buffers are gone.
TEST(HugePageArena, ABufferOutlivesItsArena) {
  std::shared_ptr<uint8_t[]> kept;
  {
    HugePageArena arena(size_t(2) << 20);
    auto first = arena.allocate(100);
    kept = arena.allocate(200);
  }
  kept[199] = 9;
  EXPECT_EQ(kept[199], 9);
  EXPECT_NE(vm_flags_of(kept.get()), "");
}

TEST(HugePageArena, ZeroBytesIsAnError) {
  HugePageArena arena;
  EXPECT_THROW(arena.allocate(0), Error);
}

}  // namespace
}  // namespace shardlm
