#include "core/membw.h"

#include <emmintrin.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <unistd.h>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"

namespace shardlm {
namespace {

// How a thread reads its slice: kStreams stretches of it side by side, a
// line of each in turn, each prefetched kPrefetchBytes ahead, as the float
// decode kernels stream their rows (matmul_strided_rows.h). One stretch at a time
// with no prefetch kept too few lines in flight to reach what the kernels
// stream on Zen 5 (docs/bench/flt5.md).
constexpr int kStreams = 4;
constexpr size_t kPrefetchBytes = 2048;

// The sum of the line at p as two 64-bit lanes (SSE2: the loads are not the
// limit once enough lines are in flight).
__m128i line_sum(const uint8_t* p) {
  const auto* v = reinterpret_cast<const __m128i*>(p);
  return _mm_add_epi64(_mm_add_epi64(_mm_load_si128(v), _mm_load_si128(v + 1)),
                       _mm_add_epi64(_mm_load_si128(v + 2), _mm_load_si128(v + 3)));
}

uint64_t read_slice(const uint8_t* p, size_t n) {
  const size_t stretch = n / 64 / kStreams * 64;
  __m128i acc[kStreams];
  for (__m128i& a : acc) a = _mm_setzero_si128();
  for (size_t i = 0; i < stretch; i += 64)
    for (int s = 0; s < kStreams; ++s) {
      const uint8_t* line = p + size_t(s) * stretch + i;
      _mm_prefetch(reinterpret_cast<const char*>(line) + kPrefetchBytes, _MM_HINT_T0);
      acc[s] = _mm_add_epi64(acc[s], line_sum(line));
    }
  size_t i = kStreams * stretch;
  for (; i + 64 <= n; i += 64) acc[0] = _mm_add_epi64(acc[0], line_sum(p + i));
  __m128i total = acc[0];
  for (int s = 1; s < kStreams; ++s) total = _mm_add_epi64(total, acc[s]);
  uint64_t lanes[2];
  std::memcpy(lanes, &total, 16);
  uint64_t sum = lanes[0] + lanes[1];
  for (; i < n; ++i) sum += p[i];
  return sum;
}

// Thread ith's share of `size` bytes: whole 64-byte lines, so that every load
// stays aligned when the buffer is.
std::pair<size_t, size_t> slice_of(size_t size, int ith, int nth) {
  const size_t lines = (size + 63) / 64;
  return {std::min(size, lines * size_t(ith) / size_t(nth) * 64),
          std::min(size, lines * size_t(ith + 1) / size_t(nth) * 64)};
}

void run_on(ThreadPool* pool, const std::function<void(int, int)>& job) {
  if (pool) {
    pool->run(job);
  } else {
    job(0, 1);
  }
}

}  // namespace

unsigned long long read_all(const void* data, size_t size, ThreadPool* pool) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  std::atomic<unsigned long long> total{0};
  run_on(pool, [&](int ith, int nth) {
    const auto [begin, end] = slice_of(size, ith, nth);
    total.fetch_add(read_slice(bytes + begin, end - begin));
  });
  return total.load();
}

size_t dram_probe_bytes() {
  long largest = 0;
  for (const int level : {_SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL4_CACHE_SIZE})
    largest = std::max(largest, ::sysconf(level));
  const size_t mib = size_t(1) << 20;
  return std::max<size_t>(512 * mib, (2 * size_t(largest) + mib - 1) / mib * mib);
}

// The buffer is what a model's weights are: 2 MiB pages where granted
// (alloc_huge_page_buffer; 4 KiB pages cost a page walk every 4 KiB), and
// each thread writes the slice it will read, so that a NUMA machine places
// it near that thread.
double measure_read_bandwidth(size_t bytes, ThreadPool* pool, int repeats) {
  bytes = std::max<size_t>(bytes / 64 * 64, 64);
  std::shared_ptr<uint8_t[]> buf;
  try {
    buf = alloc_huge_page_buffer(bytes);
  } catch (const Error& e) {
    throw Error(fmt::format("memory bandwidth: {}", e.what()));
  }
  run_on(pool, [&](int ith, int nth) {
    const auto [begin, end] = slice_of(bytes, ith, nth);
    std::memset(buf.get() + begin, 1, end - begin);
  });
  double best = 0.0;
  volatile unsigned long long sink = 0;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    const auto t0 = SteadyClock::now();
    sink = sink + read_all(buf.get(), bytes, pool);
    const double s = seconds_since(t0);
    best = std::max(best, double(bytes) / s / 1e9);
  }
  return best;
}

}  // namespace shardlm
