// `--log-level debug`: which kernel matmul() runs on each class of matrix,
// and why, logged the first time that class runs. A model's decode has a
// handful of classes, so the set stays small; without debug logging the cost
// is one level check per matmul.
#include <spdlog/spdlog.h>

#include <mutex>
#include <set>
#include <tuple>

#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {

void log_matmul_kernel(const MatrixView& w, int64_t n_tokens, Isa isa) {
  if (!spdlog::should_log(spdlog::level::debug)) return;
  static std::mutex mutex;
  static std::set<std::tuple<int, int, int64_t, int64_t, int64_t, int>> seen;
  const bool panels = w.layout == WeightLayout::Panels16;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!seen.emplace(int(w.type), int(w.layout), w.rows, w.cols, n_tokens, int(isa)).second) return;
  }
  const char* tokens = n_tokens == 1 ? "token" : "tokens";
  if (panels) {
    const PanelStreaming streaming = panel_streaming(isa, w.type, n_tokens);
    spdlog::debug("matmul: {} {}x{} panels16, {} {}: {} panel kernel, prefetch {}, K-quant codes {} ({}), "
                  "activations {} ({})",
                  dtype_name(w.type), w.rows, w.cols, n_tokens, tokens, isa_name(panel_isa(isa, w.type, n_tokens)),
                  panel_prefetch_summary(isa, w.type, n_tokens), kquant_codes_name(streaming.codes),
                  panel_prefetch_reason(isa, w.type, n_tokens),
                  activation_loads_name(activation_loads(isa, w.type, n_tokens)),
                  activation_loads_reason(isa, w.type, n_tokens));
  } else {
    spdlog::debug("matmul: {} {}x{} rows, {} {}: {} kernel ({})", dtype_name(w.type), w.rows, w.cols, n_tokens, tokens,
                  isa_name(isa), dispatch_reason(active_isa(), w.type, n_tokens));
  }
}

}  // namespace shardlm::matmul_impl
