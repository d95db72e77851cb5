#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unistd.h>

#include "core/membw.h"
#include "core/thread_pool.h"

namespace shardlm {
namespace {

// read_all adds whole 64-byte lines as 64-bit words and the bytes of a final
// partial line one by one; checking that sum proves every byte was read once
// however the buffer is split between threads and each thread's share
// between its streams.
unsigned long long expected_sum(const uint8_t* p, size_t size) {
  unsigned long long sum = 0;
  const size_t full = size / 64 * 64;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    sum += w;
  }
  for (size_t i = full; i < size; ++i) sum += p[i];
  return sum;
}

TEST(MemoryBandwidth, ReadAllReadsEveryByteOnce) {
  ThreadPool two(2);
  std::unique_ptr<uint8_t, decltype(&std::free)> buf(static_cast<uint8_t*>(std::aligned_alloc(64, 8192)), &std::free);
  for (size_t i = 0; i < 8192; ++i) buf.get()[i] = uint8_t(i * 7 + 1);
  // 15 and 70 lines: a thread's share not a multiple of the streams it reads.
  for (size_t size : {size_t(1), size_t(63), size_t(64), size_t(1000), size_t(64 * 15 + 5), size_t(64 * 70 + 63),
                      size_t(4096 + 17), size_t(8192)}) {
    const unsigned long long want = expected_sum(buf.get(), size);
    EXPECT_EQ(read_all(buf.get(), size, nullptr), want) << size;
    EXPECT_EQ(read_all(buf.get(), size, &two), want) << size;
  }
}

TEST(MemoryBandwidth, MeasuresAPositiveRate) {
  ThreadPool two(2);
  EXPECT_GT(measure_read_bandwidth(1 << 20, nullptr, 1), 0.0);
  EXPECT_GT(measure_read_bandwidth(1 << 20, &two, 1), 0.0);
}

TEST(MemoryBandwidth, ProbeBufferIsTwiceTheLargestCacheAndAtLeast512MiB) {
  const size_t bytes = dram_probe_bytes();
  EXPECT_GE(bytes, size_t(512) << 20);
  EXPECT_EQ(bytes % (size_t(1) << 20), 0u);
  const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) {
    EXPECT_GE(bytes, 2 * size_t(l3));
  }
}

}  // namespace
}  // namespace shardlm
