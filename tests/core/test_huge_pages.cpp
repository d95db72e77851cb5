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

}  // namespace
}  // namespace shardlm
