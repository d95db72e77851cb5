#include "parallel/kernel_rates.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/bench_matrix.h"
#include "core/error.h"

namespace shardlm::parallel {
namespace {

constexpr int kClasses[] = {1, 2, 8};
constexpr int64_t kCols = 2048;

}  // namespace

double KernelRates::rate(DType type, int64_t tokens) const {
  const auto it = gbs.find({type, token_class(tokens)});
  return it == gbs.end() ? 0 : it->second;
}

nlohmann::json KernelRates::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, v] : gbs) {
    auto& row = j[std::string(dtype_name(key.first))];
    if (row.is_null()) row = nlohmann::json::array({0.0, 0.0, 0.0});
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
    if (!row.is_array() || row.size() != std::size(kClasses))
      throw Error(fmt::format("{}: kernel_rates[{}] is not [GB/s at 1, 2, 8 tokens]", who, name));
    for (size_t i = 0; i < row.size(); ++i) {
      if (!row[i].is_number()) throw Error(fmt::format("{}: kernel_rates[{}][{}] is not a number", who, name, i));
      const double v = row[i].get<double>();
      if (!(v >= 0 && v < 1e6)) throw Error(fmt::format("{}: kernel_rates[{}][{}] = {} is out of range", who, name, i, v));
      if (v > 0) r.gbs[{*type, kClasses[i]}] = v;
    }
  }
  return r;
}

std::vector<DType> common_weight_types() {
  return {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K,
          DType::Q5_K, DType::Q6_K, DType::F16,  DType::BF16, DType::F32};
}

KernelRates measure_kernel_rates(const std::vector<DType>& types, ThreadPool* pool, size_t matrix_bytes) {
  using Clock = std::chrono::steady_clock;
  KernelRates r;
  for (DType type : types) {
    const int64_t rows = std::max<int64_t>(64, int64_t(matrix_bytes / row_bytes(type, kCols)) / 16 * 16);
    const BenchMatrix m = make_bench_matrix(type, rows, kCols);
    const double bytes = double(m.view.row_stride) * double(rows);
    std::vector<float> x(size_t(8 * kCols), 0.5f), y(size_t(8 * rows));
    for (int tokens : kClasses) {
      double best = 1e30;
      for (int i = 0; i < 4; ++i) {  // the first call also pages the matrix in
        const auto t0 = Clock::now();
        matmul(m.view, x.data(), tokens, y.data(), pool);
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      }
      r.gbs[{type, tokens}] = bytes / best / 1e9;
    }
  }
  return r;
}

}  // namespace shardlm::parallel
