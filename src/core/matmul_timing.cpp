#include "core/matmul_timing.h"

#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "core/cpu.h"
#include "core/huge_pages.h"

namespace shardlm::matmul_impl {
namespace {

constexpr int kRounds = 11;           // odd: the median is one round's time
constexpr size_t kSliceBytes = 512 << 10;
constexpr int64_t kCols = 4096;       // a multiple of every block size

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// clflushopt where the CPU has it: clflush is ordered flush after flush
// (AMX Xeon: 1.7 ms for 512 KiB against 47 us), and the flushes before
// each timed call were most of the timing's cost (a worker times its
// kernel rates before it listens).
__attribute__((target("clflushopt"))) void flush_lines_unordered(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i += 64) _mm_clflushopt(const_cast<uint8_t*>(p + i));
}

void flush_from_caches(const uint8_t* p, size_t n) {
  if (cpu_caps().clflushopt) {
    flush_lines_unordered(p, n);
  } else {
    for (size_t i = 0; i < n; i += 64) _mm_clflush(p + i);
  }
  _mm_mfence();
}

int64_t slice_rows(DType type) {
  return std::max<int64_t>(kPanelRows, int64_t(kSliceBytes / row_bytes(type, kCols)) / kPanelRows * kPanelRows);
}

}  // namespace

std::vector<double> median_times(size_t n, const std::function<void(size_t)>& run, const uint8_t* flush,
                                 size_t flush_bytes) {
  std::vector<std::vector<double>> samples(n);
  for (int round = -1; round < kRounds; ++round) {  // round -1 warms code, clocks and the activations
    for (size_t i = 0; i < n; ++i) {
      if (flush) flush_from_caches(flush, flush_bytes);
      const double t0 = thread_seconds();
      run(i);
      const double s = thread_seconds() - t0;
      if (round >= 0) samples[i].push_back(s);
    }
  }
  std::vector<double> median(n);
  for (size_t i = 0; i < n; ++i) {
    std::nth_element(samples[i].begin(), samples[i].begin() + kRounds / 2, samples[i].end());
    median[i] = samples[i][kRounds / 2];
  }
  return median;
}

size_t fastest_unless_incumbent_within(const std::vector<double>& times, double margin) {
  const size_t fastest = size_t(std::min_element(times.begin(), times.end()) - times.begin());
  return times[fastest] < times[0] * (1.0 - margin) ? fastest : 0;
}

// Any bytes make valid weights except float NaNs and denormals (slow paths):
// 0x3C repeated is ~1 as f16/bf16 and ~0.01 as f32, and a sane f16 scale for
// every block type; in panels as in rows. The slice's buffer is one 2 MiB
// page, as a model's weights stream from (matmul_panel_prefetch.h: on 4 KiB
// pages the plans ranked otherwise).
TimingMatmul::TimingMatmul(DType type, int64_t n_tokens, WeightLayout layout)
    : weight_bytes_(row_bytes(type, kCols) * size_t(slice_rows(type))),
      weights_(alloc_huge_page_buffer(std::max(weight_bytes_, kHugePageBytes))),
      w_{type, weights_.get(), slice_rows(type), kCols, row_bytes(type, kCols), layout},
      x_(size_t(n_tokens * kCols)),
      y_(size_t(n_tokens * w_.rows)),
      prepared_(x_.data(), n_tokens, kCols) {
  std::memset(weights_.get(), 0x3C, weight_bytes_);
  for (size_t i = 0; i < x_.size(); ++i) x_[i] = float(int(i % 13) - 6) * 0.1f;
  args_.w = &w_;
  args_.x = prepared_.for_type(type, nullptr, &args_.x_stride);
  args_.n_tokens = n_tokens;
  args_.y = y_.data();
}

}  // namespace shardlm::matmul_impl
