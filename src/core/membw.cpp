#include "core/membw.h"

#include <emmintrin.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/clock.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace shardlm {
namespace {

// SSE2 is enough: two 16-byte loads per cycle outrun DRAM many times over.
uint64_t read_slice(const uint8_t* p, size_t n) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm_add_epi64(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_add_epi64(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    a2 = _mm_add_epi64(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    a3 = _mm_add_epi64(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  uint64_t lanes[2];
  std::memcpy(lanes, &s, 16);
  uint64_t sum = lanes[0] + lanes[1];
  for (; i < n; ++i) sum += p[i];
  return sum;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

unsigned long long read_all(const void* data, size_t size, ThreadPool* pool) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  std::atomic<unsigned long long> total{0};
  const auto job = [&](int ith, int nth) {
    // 64-byte aligned slices keep every load aligned when `data` is.
    const size_t lines = (size + 63) / 64;
    const size_t begin = std::min(size, lines * size_t(ith) / size_t(nth) * 64);
    const size_t end = std::min(size, lines * size_t(ith + 1) / size_t(nth) * 64);
    total.fetch_add(read_slice(bytes + begin, end - begin));
  };
  if (pool) {
    pool->run(job);
  } else {
    job(0, 1);
  }
  return total.load();
}

double measure_read_bandwidth(size_t bytes, ThreadPool* pool, int repeats) {
  bytes = std::max<size_t>(bytes / 64 * 64, 64);
  std::unique_ptr<uint8_t, FreeDeleter> buf(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
  if (!buf) throw Error(fmt::format("memory bandwidth: cannot allocate {} MiB", bytes >> 20));
  std::memset(buf.get(), 1, bytes);  // commit the pages before timing
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
