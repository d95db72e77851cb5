#include "parallel/token_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include <sys/mman.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/ops.h"

namespace shardlm::parallel {
namespace {

constexpr int64_t kWidth = 2048, kHeadDim = 64, kHeads = 32, kKvHeads = 8, kFf = 8192;
constexpr int64_t kContext = 256;
constexpr int kCostPasses = 5;  // the median is the figure, as for kernel rates
constexpr double kMaxNs = 1e6;   // a value or a multiply-add slower than 1 ms is no measurement

// Seconds per call of `fn`: the median of kCostPasses passes of `calls` calls.
double median_seconds(int calls, const std::function<void()>& fn) {
  std::vector<double> seconds;
  fn();  // pages in and warms the caches
  for (int i = 0; i < kCostPasses; ++i) {
    const auto t0 = SteadyClock::now();
    for (int k = 0; k < calls; ++k) fn();
    seconds.push_back(seconds_since(t0) / calls);
  }
  std::nth_element(seconds.begin(), seconds.begin() + kCostPasses / 2, seconds.end());
  return seconds[size_t(kCostPasses / 2)];
}

double vector_ns_measured() {
  std::vector<float> x(kWidth, 0.5f), norm_w(kWidth, 1.0f), xn(kWidth), proj(kWidth, 0.25f);
  std::vector<float> q(kHeads * kHeadDim, 0.1f), k(kKvHeads * kHeadDim, 0.2f), v(kKvHeads * kHeadDim, 0.3f);
  std::vector<float> gate(kFf, 0.1f), up(kFf, 0.2f);
  ops::RopeParams rp;
  rp.head_dim = int(kHeadDim);
  rp.n_rot = int(kHeadDim);
  rp.freq_base = 500000;
  int64_t pos = 0;
  // One layer of one token, in the model's order (model/model.cpp).
  const double seconds = median_seconds(200, [&] {
    ops::rms_norm(x.data(), norm_w.data(), kWidth, 1e-5f, xn.data());
    ops::rope(q.data(), int(kHeads), rp, pos);
    ops::rope(k.data(), int(kKvHeads), rp, pos);
    ops::add(x.data(), proj.data(), x.data(), kWidth);
    ops::rms_norm(x.data(), norm_w.data(), kWidth, 1e-5f, xn.data());
    ops::swiglu(gate.data(), up.data(), gate.data(), kFf);
    ops::add(x.data(), proj.data(), x.data(), kWidth);
    pos = (pos + 1) % kContext;
  });
  return seconds * 1e9 / layer_vector_values(kWidth, kHeads * kHeadDim, kKvHeads * kHeadDim, kFf);
}

// kContext tokens' key and value rows into a cache of kStoreLayers layers,
// mapped fresh for each pass (so every page is faulted in by the store that
// first writes it, as a cache fills during a decode).
double kv_store_ns_measured() {
  constexpr int64_t kStoreLayers = 16;
  const int64_t row_bytes = kHeadDim * int64_t(sizeof(float));
  const size_t run_bytes = size_t(kContext * row_bytes);  // one (layer, head)'s positions
  const size_t bytes = size_t(2 * kStoreLayers * kKvHeads) * run_bytes;
  const std::vector<float> row(size_t(kHeadDim), 0.5f);
  std::vector<double> seconds;
  for (int pass = 0; pass <= kCostPasses; ++pass) {  // pass 0 warms the code and the allocator
    void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) throw Error("token costs: cannot map a KV cache to measure");
    auto* cache = static_cast<uint8_t*>(mapped);
    const auto t0 = SteadyClock::now();
    for (int64_t pos = 0; pos < kContext; ++pos)
      for (int64_t run = 0; run < 2 * kStoreLayers * kKvHeads; ++run)  // K and V of every (layer, head)
        std::memcpy(cache + size_t(run) * run_bytes + size_t(pos * row_bytes), row.data(), size_t(row_bytes));
    if (pass > 0) seconds.push_back(seconds_since(t0));
    munmap(mapped, bytes);
  }
  std::nth_element(seconds.begin(), seconds.begin() + kCostPasses / 2, seconds.end());
  return seconds[size_t(kCostPasses / 2)] * 1e9 / double(bytes);
}

double attention_ns_measured() {
  const int64_t group = kHeads / kKvHeads;
  std::vector<float> q(kHeads * kHeadDim, 0.01f), out(kHeads * kHeadDim), scores(group * kContext);
  std::vector<float> cache(size_t(2 * kKvHeads * kContext * kHeadDim), 0.02f);  // K then V per KV head
  // One token's attention in one layer: every KV head's group of query heads.
  const double seconds = median_seconds(20, [&] {
    for (int64_t h = 0; h < kKvHeads; ++h) {
      ops::KvHead head;
      head.k = &cache[size_t(2 * h * kContext * kHeadDim)];
      head.v = &cache[size_t((2 * h + 1) * kContext * kHeadDim)];
      head.k_stride = head.v_stride = kHeadDim;
      head.dim_k = head.dim_v = kHeadDim;
      ops::attend(&q[size_t(h * group * kHeadDim)], group, head, kContext, 0.125f, scores.data(),
                  &out[size_t(h * group * kHeadDim)]);
    }
  });
  return seconds * 1e9 / double(kHeads * kContext * 2 * kHeadDim);
}

double figure(const nlohmann::json& j, const char* key, const std::string& who) {
  if (!j.contains(key)) throw Error(fmt::format("{}: token_costs has no '{}'", who, key));
  const auto& v = j.at(key);
  if (!v.is_number()) throw Error(fmt::format("{}: token_costs.{} is not a number", who, key));
  const double x = v.get<double>();
  if (!(x >= 0 && x < kMaxNs)) throw Error(fmt::format("{}: token_costs.{} = {} is out of range", who, key, x));
  return x;
}

}  // namespace

double layer_vector_values(int64_t n_embd, int64_t q_dims, int64_t kv_dims, int64_t ff_rows) {
  return double(4 * n_embd + q_dims + kv_dims + 2 * ff_rows);
}

nlohmann::json TokenCosts::to_json() const {
  return {{"vector_ns", vector_ns}, {"kv_store_ns", kv_store_ns}, {"attention_ns", attention_ns}};
}

TokenCosts TokenCosts::from_json(const nlohmann::json& j, const std::string& who) {
  if (!j.is_object()) throw Error(fmt::format("{}: token_costs is not an object", who));
  for (const auto& [key, v] : j.items())
    if (key != "vector_ns" && key != "kv_store_ns" && key != "attention_ns")
      throw Error(fmt::format("{}: token_costs has an unknown key '{}'", who, key));
  return {figure(j, "vector_ns", who), figure(j, "kv_store_ns", who), figure(j, "attention_ns", who)};
}

TokenCosts measure_token_costs() { return {vector_ns_measured(), kv_store_ns_measured(), attention_ns_measured()}; }

}  // namespace shardlm::parallel
