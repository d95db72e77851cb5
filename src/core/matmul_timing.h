// Timing kernels against each other at run time, for the choices matmul
// makes once per process by measuring them on this CPU: the ISA of a Rows
// kernel (matmul_dispatch.cpp), a panel kernel's prefetches (and for the
// K-quant one_pass where its codes are made: matmul_prefetch_plan.cpp) and
// the VNNI one_pass's activation loads (matmul_activation_loads.cpp). No
// choice can change a result's bits.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/matmul.h"
#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {

// Token counts timed: decode and batched decode. Beyond, prefill.
constexpr int64_t kTimedTokens = 15;

// The median thread CPU time of run(i) for each candidate i < n, over rounds
// that alternate between the candidates, so that a slow spell (clock, the
// sibling thread, the other vCPU's traffic) hits all of them; time the
// thread was not running does not count. With `flush` (bytes [flush,
// flush + flush_bytes)) those bytes are written back and evicted from every
// cache level before each call: the weights come from DRAM, as in decode.
std::vector<double> median_times(size_t n, const std::function<void(size_t)>& run, const uint8_t* flush = nullptr,
                                 size_t flush_bytes = 0);

// The index of the fastest of `times`, unless times[0] (the incumbent, the
// choice measured best where the code was tuned) is within `margin` of it,
// so that near-ties keep one choice from process to process. (A chain of
// "faster than the pick so far by the margin" took whichever of two
// near-equal rivals came first, from one process to the next: Xeon, Q4_K's
// prefetch plans, 12.5 or 15 GB/s.)
size_t fastest_unless_incumbent_within(const std::vector<double>& times, double margin);

// A matrix of `type` in `layout` with ~512 KiB of weights (far beyond what
// the prefetchers run ahead, a fraction of a millisecond from DRAM) and
// n_tokens activations: what the timings run kernels on.
class TimingMatmul {
 public:
  TimingMatmul(DType type, int64_t n_tokens, WeightLayout layout);
  TimingMatmul(const TimingMatmul&) = delete;
  TimingMatmul& operator=(const TimingMatmul&) = delete;

  KernelArgs& args() { return args_; }
  void run(Kernel kernel) const { kernel(args_, 0, w_.rows); }
  const uint8_t* weights() const { return weights_.get(); }
  size_t weight_bytes() const { return weight_bytes_; }
  size_t slice_kib() const { return weight_bytes_ >> 10; }

 private:
  size_t weight_bytes_;
  std::shared_ptr<uint8_t[]> weights_;  // on a 2 MiB page, as a model's weights
  MatrixView w_;
  std::vector<float> x_, y_;
  PreparedInput prepared_;
  KernelArgs args_;
};

// Choices measured once per process per (ISA, type, 1..kTimedTokens tokens),
// each with the words that say what decided it (for the kernel log). The
// first caller measures; the others wait for it. A measurement may ask for
// another slot's choice (the lock is recursive).
template <class Choice>
class MeasuredChoices {
 public:
  // measure(&why) -> Choice, run once per slot.
  template <class Measure>
  Choice get(Isa isa, DType type, int64_t n_tokens, Measure measure) {
    std::atomic<int8_t>& slot = slots_[slot_of(isa, type, n_tokens)];
    if (const int8_t c = slot.load(std::memory_order_acquire)) return Choice(c - 1);
    const std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (const int8_t c = slot.load(std::memory_order_relaxed)) return Choice(c - 1);
    const Choice choice = measure(&why_[slot_of(isa, type, n_tokens)]);
    slot.store(int8_t(int(choice) + 1), std::memory_order_release);
    return choice;
  }
  // What decided the slot (measured already: call get first).
  std::string why(Isa isa, DType type, int64_t n_tokens) {
    const std::lock_guard<std::recursive_mutex> lock(mutex_);
    return why_[slot_of(isa, type, n_tokens)];
  }
  static bool timed(DType type, int64_t n_tokens) {
    return n_tokens >= 1 && n_tokens <= kTimedTokens && size_t(type) < size_t(kTypeIds);
  }

 private:
  static constexpr size_t kTypeIds = 64;  // DType ids are below this
  static size_t slot_of(Isa isa, DType type, int64_t n_tokens) {
    return (size_t(isa) * kTypeIds + size_t(type)) * kTimedTokens + size_t(n_tokens - 1);
  }
  std::array<std::atomic<int8_t>, 4 * kTypeIds * kTimedTokens> slots_{};  // 0: not measured, else choice + 1
  std::recursive_mutex mutex_;
  std::map<size_t, std::string> why_;  // per slot, under mutex_
};

}  // namespace shardlm::matmul_impl
