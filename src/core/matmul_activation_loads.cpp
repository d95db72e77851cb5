// Which activation loads (ActivationLoads, matmul_kernels.h) the VNNI
// one_pass of the 32-element types runs with, per type and token count.
// The two differ in the ports they load: the spread adds a vpshufd per dword
// where the broadcasts add a load, and CPUs differ in which of those is
// spare next to two vpdpbusd a cycle (Zen 5: the spread, docs/bench/bat7.md;
// a Xeon with AMX: the broadcasts, 10-15 % at 4-8 tokens). So both are timed
// once per process, on first use, on weights hot in L2: what differs is the
// arithmetic's issue, and from DRAM the weights' stream would hide half of
// it. The spread (Zen 5's) is the incumbent and another replaces it only
// when faster by kMargin, so a tie keeps one choice from process to process.
#include <fmt/format.h>

#include <string>

#include "core/matmul_kernels.h"
#include "core/matmul_timing.h"

namespace shardlm::matmul_impl {
namespace {

constexpr double kMargin = 0.05;

bool has_choice(Isa isa, DType type, int64_t n_tokens) {
  return n_tokens >= 2 && n_tokens <= kPanelOnePassTokens && traits(type).block_elems == 32 &&
         panel_isa(isa, type, n_tokens) == Isa::Avx512 && MeasuredChoices<ActivationLoads>::timed(type, n_tokens);
}

ActivationLoads measure(DType type, int64_t n_tokens, std::string* why) {
  const Kernel kernel = panel_kernel(Isa::Avx512, type, n_tokens);
  TimingMatmul m(type, n_tokens, WeightLayout::Panels16);
  const PanelStreaming streaming = panel_streaming(Isa::Avx512, type, n_tokens);
  m.args().prefetch = streaming.plan;
  m.args().prefetch_ahead = streaming.ahead;
  m.args().streams = streaming.streams;
  const ActivationLoads loads[] = {ActivationLoads::kSpreadQuad, ActivationLoads::kBroadcast};
  const std::vector<double> t = median_times(2, [&](size_t i) {
    m.args().activations = loads[i];
    m.run(kernel);
  });
  const ActivationLoads pick = loads[fastest_unless_incumbent_within(t, kMargin)];
  *why = fmt::format("median thread CPU time on {} KiB in cache: {} {:.1f} us, {} {:.1f} us", m.slice_kib(),
                     activation_loads_name(loads[0]), t[0] * 1e6, activation_loads_name(loads[1]), t[1] * 1e6);
  return pick;
}

MeasuredChoices<ActivationLoads> g_loads;

}  // namespace

const char* activation_loads_name(ActivationLoads loads) {
  return loads == ActivationLoads::kSpreadQuad ? "quad spread" : "broadcasts";
}

ActivationLoads activation_loads(Isa isa, DType type, int64_t n_tokens) {
  if (!has_choice(isa, type, n_tokens)) return ActivationLoads::kSpreadQuad;
  return g_loads.get(Isa::Avx512, type, n_tokens, [&](std::string* why) { return measure(type, n_tokens, why); });
}

std::string activation_loads_reason(Isa isa, DType type, int64_t n_tokens) {
  if (!has_choice(isa, type, n_tokens)) return "no choice: not the VNNI one_pass of a 32-element type";
  activation_loads(isa, type, n_tokens);
  return g_loads.why(Isa::Avx512, type, n_tokens);
}

}  // namespace shardlm::matmul_impl
