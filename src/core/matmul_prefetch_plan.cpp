// Which prefetches a panel kernel streams a Panels16 matrix with
// (PanelPrefetchPlan, matmul_panel_prefetch.h), per ISA, type and token
// count. CPUs disagree: on Zen 5 one token of Q4_0 streamed fastest with
// the page starts alone and 1.4-1.8x slower with a prefetch of every line;
// on a Xeon with AMX the page starts alone made it 1.3-1.8x slower than
// every line into L2, and a K-quant super-block's prefetches went ~10 %
// faster spread over its work than in one burst. So each plan is timed once
// per process, on first use, on weights flushed from every cache level
// before each call (a model's weights come from DRAM in decode), the plans
// alternating for several rounds. The plan measured best on Zen 5 for that
// type and token count is the incumbent; another replaces it only when
// faster by kMargin, so plans that tie keep one choice from process to
// process. The prefetches cannot change a result: every plan runs the same
// arithmetic on the same bytes.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/matmul_kernels.h"
#include "core/matmul_timing.h"

namespace shardlm::matmul_impl {
namespace {

constexpr double kMargin = 0.05;
constexpr PanelPrefetchPlan kPlans[] = {PanelPrefetchPlan::kPageStarts, PanelPrefetchPlan::kLinesToL1,
                                        PanelPrefetchPlan::kLinesToL2, PanelPrefetchPlan::kSpreadToL1,
                                        PanelPrefetchPlan::kSpreadToL2};

// Only the K-quants' decode spreads its prefetches; elsewhere a spread plan
// is the same code as its burst twin, not worth timing.
bool may_spread(DType type) { return traits(type).block_elems == QK_K; }

// Zen 5's (docs/bench/dec5.md, bat7.md): long blocks (the K-quants) and the
// AMX batch tiles every line into L1; one token of the 32-element types the
// page starts alone; 2-8 tokens every line into L2 as well.
PanelPrefetchPlan zen5_plan(DType type, int64_t n_tokens) {
  if (kPanelRows * traits(type).block_bytes >= 2048 || n_tokens > kPanelOnePassTokens)
    return PanelPrefetchPlan::kLinesToL1;
  return n_tokens == 1 ? PanelPrefetchPlan::kPageStarts : PanelPrefetchPlan::kLinesToL2;
}

PanelPrefetchPlan measure(Isa isa, DType type, int64_t n_tokens, std::string* why) {
  const Kernel kernel = panel_kernel(isa, type, n_tokens);
  const PanelPrefetchPlan incumbent = zen5_plan(type, n_tokens);
  if (panel_isa(isa, type, n_tokens) == Isa::Scalar) {
    *why = "the scalar reference: no prefetches";
    return incumbent;
  }
  std::vector<PanelPrefetchPlan> plans{incumbent};
  for (PanelPrefetchPlan p : kPlans)
    if (p != incumbent && (!plan_spreads(p) || may_spread(type))) plans.push_back(p);
  TimingMatmul m(type, n_tokens, WeightLayout::Panels16);
  const std::vector<double> t = median_times(
      plans.size(),
      [&](size_t i) {
        m.args().prefetch = plans[i];
        m.run(kernel);
      },
      m.weights(), m.weight_bytes());
  const size_t pick = fastest_unless_incumbent_within(t, kMargin);  // plans[0]: the incumbent
  *why = fmt::format("median thread CPU time on {} KiB flushed from the caches:", m.slice_kib());
  for (size_t i = 0; i < plans.size(); ++i) *why += fmt::format(" {} {:.1f} us", prefetch_plan_name(plans[i]), t[i] * 1e6);
  return plans[pick];
}

MeasuredChoices<PanelPrefetchPlan> g_plans;

}  // namespace

const char* prefetch_plan_name(PanelPrefetchPlan plan) {
  switch (plan) {
    case PanelPrefetchPlan::kPageStarts: return "page starts";
    case PanelPrefetchPlan::kLinesToL1: return "lines to L1";
    case PanelPrefetchPlan::kLinesToL2: return "lines to L2";
    case PanelPrefetchPlan::kSpreadToL1: return "lines to L1, spread";
    case PanelPrefetchPlan::kSpreadToL2: return "lines to L2, spread";
  }
  return "?";
}

PanelPrefetchPlan panel_prefetch_plan(Isa isa, DType type, int64_t n_tokens) {
  if (!MeasuredChoices<PanelPrefetchPlan>::timed(type, n_tokens)) return PanelPrefetchPlan::kLinesToL1;
  return g_plans.get(isa, type, n_tokens, [&](std::string* why) { return measure(isa, type, n_tokens, why); });
}

std::string panel_prefetch_reason(Isa isa, DType type, int64_t n_tokens) {
  if (!MeasuredChoices<PanelPrefetchPlan>::timed(type, n_tokens)) return "prefill: every line into L1";
  panel_prefetch_plan(isa, type, n_tokens);
  return g_plans.why(isa, type, n_tokens);
}

}  // namespace shardlm::matmul_impl
