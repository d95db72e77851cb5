#include "parallel/kernel_rates.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <set>
#include <thread>

#include <immintrin.h>
#include <unistd.h>

#include "core/bench_matrix.h"
#include "core/clock.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"

namespace shardlm::parallel {
namespace {

constexpr int kClasses[] = {1, 2, 4, 8};
constexpr int kOldClasses[] = {1, 2, 8};  // the JSON rows of earlier builds
constexpr int64_t kCols = 2048;    // a layer's width (n_embd) where the budget allows
constexpr int64_t kMinCols = 256;  // else halved down to one K-quant block
constexpr int kTimedPasses = 5;    // per (type, tokens); the median is the rate

}  // namespace

double KernelRates::rate(DType type, int64_t tokens) const {
  std::vector<std::pair<double, double>> at;  // (tokens, seconds per GB)
  for (auto it = gbs.lower_bound({type, 0}); it != gbs.end() && it->first.first == type; ++it)
    at.push_back({double(it->first.second), 1 / it->second});
  if (at.empty()) return 0;
  const double t = double(tokens);
  double s = at.front().second;
  if (t > at.front().first && at.size() == 1) {
    s *= t / at.front().first;  // one measured count: time per token
  } else if (t > at.front().first) {
    size_t i = 1;
    while (i + 1 < at.size() && t > at[i].first) ++i;
    const auto [t0, s0] = at[i - 1];
    const auto [t1, s1] = at[i];
    s = s0 + (s1 - s0) * (t - t0) / (t1 - t0);
  }
  return 1 / std::max(s, 1e-12);
}

nlohmann::json KernelRates::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, v] : gbs) {
    auto& row = j[std::string(dtype_name(key.first))];
    if (row.is_null()) row = nlohmann::json::array({0.0, 0.0, 0.0, 0.0});
    const size_t i = size_t(std::find(std::begin(kClasses), std::end(kClasses), key.second) - std::begin(kClasses));
    row[i] = v;
  }
  return j;
}

KernelRates KernelRates::from_json(const nlohmann::json& j, const std::string& who) {
  KernelRates r;
  if (!j.is_object()) throw Error(fmt::format("{}: kernel_rates is not an object", who));
  for (const auto& [name, row] : j.items()) {
    const auto type = dtype_from_name(name);
    if (!type) continue;  // a newer worker's type
    if (!row.is_array() || (row.size() != std::size(kClasses) && row.size() != std::size(kOldClasses)))
      throw Error(fmt::format("{}: kernel_rates[{}] is not [GB/s at 1, 2, 4, 8 tokens]", who, name));
    const int* classes = row.size() == std::size(kClasses) ? kClasses : kOldClasses;
    for (size_t i = 0; i < row.size(); ++i) {
      if (!row[i].is_number()) throw Error(fmt::format("{}: kernel_rates[{}][{}] is not a number", who, name, i));
      const double v = row[i].get<double>();
      if (!(v >= 0 && v < 1e6)) throw Error(fmt::format("{}: kernel_rates[{}][{}] = {} is out of range", who, name, i, v));
      if (v > 0) r.gbs[{*type, classes[i]}] = v;
    }
  }
  return r;
}

std::vector<DType> common_weight_types() {
  return {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K,
          DType::Q5_K, DType::Q6_K, DType::F16,  DType::BF16, DType::F32};
}

size_t streamed_matrix_bytes(size_t at_least) {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::clamp(llc > 0 ? 2 * size_t(llc) : at_least, at_least, size_t(1) << 30);
}

std::vector<DType> matmul_weight_types(const gguf::File& file) {
  std::set<DType> types;
  const bool tied = !file.find_tensor("output.weight");
  for (const auto& t : file.tensors())
    if (t.n_dims == 2 && (tied || t.name != "token_embd.weight")) types.insert(t.type);
  return {types.begin(), types.end()};
}

namespace {

// One transformer layer's matrices (rows, cols) at `width`: query, key,
// value (a fourth of the heads: grouped-query attention), attention output,
// FFN gate and up (4 × width rows), FFN down (4 × width columns).
constexpr size_t kLayerMatrices = 7, kAttentionOutput = 3;
std::array<std::pair<int64_t, int64_t>, kLayerMatrices> layer_shapes(int64_t width) {
  return {{{width, width},     {width / 4, width},     {width / 4, width}, {width, width},
           {4 * width, width}, {4 * width, width}, {width, 4 * width}}};
}

// Whether matrix i of copies of layer_shapes, one layer after another, ends
// a segment between tensor-parallel all-reduces: an attention output or an
// FFN down.
bool ends_segment(size_t i) { return i % kLayerMatrices == kAttentionOutput || i % kLayerMatrices == kLayerMatrices - 1; }

int64_t layer_width(DType type, size_t budget_bytes) {
  int64_t width = kCols;
  auto bytes = [&](int64_t w) {
    size_t n = 0;
    for (const auto& [rows, cols] : layer_shapes(w)) n += size_t(rows) * row_bytes(type, cols);
    return n;
  };
  while (width > kMinCols && bytes(width) > budget_bytes) width /= 2;
  return width;
}

// Measurers that stand for tensor-parallel ranks meet where those ranks
// all-reduce: after each copy of a layer's attention output and of its FFN
// down. Busy-polling, as the ranks' own waits do where each has a core; a
// measurer that failed breaks the meeting so that none waits for it.
class SegmentMeeting {
 public:
  explicit SegmentMeeting(int n) : n_(n) {}
  void arrive_and_wait() {
    const int generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == generation && !broken_.load(std::memory_order_relaxed))
      _mm_pause();
  }
  void break_off() { broken_.store(true, std::memory_order_relaxed); }

 private:
  const int n_;
  std::atomic<int> arrived_{0}, generation_{0};
  std::atomic<bool> broken_{false};
};

// One measurer's rates: kTimedPasses timed passes over its own copies of a
// layer per (type, tokens), after one that pages the copies in; `meet` runs
// before each pass, so measurers sharing the host stream together, and
// `meet_segment` after each matrix that ends a segment.
KernelRates measure_one(const std::vector<DType>& types, ThreadPool* pool, size_t matrix_bytes,
                        const std::function<void()>& meet, const std::function<void()>& meet_segment) {
  KernelRates r;
  for (DType type : types) {
    // Copies of one layer's matrices up to `matrix_bytes`, each its own
    // allocation, multiplied in a model's order: the rate includes what one
    // large matrix hides (every call's setup and its stream's ramp, the
    // slower long rows of FFN down), i.e. what the model runs.
    const int64_t width = layer_width(type, matrix_bytes);
    std::vector<BenchMatrix> copies;
    double bytes = 0;
    while (copies.empty() || bytes < double(matrix_bytes)) {
      for (const auto& [rows, cols] : layer_shapes(width)) {
        copies.push_back(make_model_bench_matrix(type, rows, cols));
        bytes += double(copies.back().view.row_stride) * double(rows);
      }
    }
    std::vector<float> x(size_t(8 * 4 * width), 0.5f), y(size_t(8 * 4 * width));
    for (int tokens : kClasses) {
      std::vector<double> seconds;
      for (int i = 0; i <= kTimedPasses; ++i) {  // pass 0 pages the matrices in
        meet();
        const auto t0 = SteadyClock::now();
        for (size_t m = 0; m < copies.size(); ++m) {
          matmul(copies[m].view, x.data(), tokens, y.data(), pool);
          if (ends_segment(m)) meet_segment();
        }
        if (i > 0) seconds.push_back(seconds_since(t0));
      }
      // The median, not the best: a decode is timed over all its steps, and
      // on a busy host the best pass is the one nobody else ran in.
      std::nth_element(seconds.begin(), seconds.begin() + kTimedPasses / 2, seconds.end());
      r.gbs[{type, tokens}] = bytes / seconds[size_t(kTimedPasses / 2)] / 1e9;
    }
  }
  return r;
}

}  // namespace

KernelRates measure_kernel_rates(const std::vector<DType>& types, ThreadPool* pool, size_t matrix_bytes,
                                 int ranks_at_once, int tp_group) {
  if (ranks_at_once <= 1) return measure_one(types, pool, matrix_bytes, [] {}, [] {});
  // Each rank on the host streams its own share of the model: one measurer
  // per rank, each with its own copies of `matrix_bytes` and its own threads,
  // passes started together. A rank's rate is their mean. Where each has a
  // core, a tensor-parallel group's measurers meet at every segment as its
  // ranks do, so the rate includes the waits for whichever is late (a step
  // of tp ranks takes the sum over segments of the slowest one's time, not
  // the slowest one's sum; pipeline stages only hand off per micro-batch).
  if (tp_group < 1 || ranks_at_once % tp_group != 0)
    throw Error(fmt::format("kernel rates: {} ranks at once in tensor-parallel groups of {}", ranks_at_once, tp_group));
  std::barrier meeting(ranks_at_once);
  std::vector<std::unique_ptr<SegmentMeeting>> groups;
  for (int g = 0; g < ranks_at_once / tp_group; ++g) groups.push_back(std::make_unique<SegmentMeeting>(tp_group));
  const bool meet_segments = tp_group > 1 && ranks_at_once <= usable_cpus();
  std::vector<KernelRates> each(static_cast<size_t>(ranks_at_once));
  std::vector<std::exception_ptr> failed(static_cast<size_t>(ranks_at_once));
  auto run = [&](int i) {
    try {
      std::unique_ptr<ThreadPool> own;
      if (pool && i > 0) own = std::make_unique<ThreadPool>(pool->size());
      each[size_t(i)] = measure_one(types, i == 0 ? pool : own.get(), matrix_bytes, [&] { meeting.arrive_and_wait(); },
                                    [&] {
                                      if (meet_segments) groups[size_t(i / tp_group)]->arrive_and_wait();
                                    });
    } catch (...) {
      // E.g. no memory for the copies: the others stop waiting for this one,
      // and the caller gets the error, not a hang or a terminate.
      failed[size_t(i)] = std::current_exception();
      groups[size_t(i / tp_group)]->break_off();
      meeting.arrive_and_drop();
    }
  };
  std::vector<std::thread> others;
  for (int i = 1; i < ranks_at_once; ++i) others.emplace_back(run, i);
  run(0);
  for (auto& t : others) t.join();
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
  KernelRates mean;
  for (const auto& [key, gbs] : each[0].gbs) {
    double sum = 0;
    for (const KernelRates& k : each) sum += k.gbs.at(key);
    mean.gbs[key] = sum / double(ranks_at_once);
  }
  return mean;
}

}  // namespace shardlm::parallel
