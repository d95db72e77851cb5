// Which prefetches a panel kernel streams a Panels16 matrix with
// (PanelPrefetchPlan, matmul_panel_prefetch.h), per ISA, type and token
// count. CPUs disagree: on Zen 5 one token of Q4_0 streamed fastest with
// the page starts alone and 1.4-1.8x slower with a prefetch of every line;
// on a Xeon with AMX the page starts alone made it 1.3-1.8x slower than
// every line into L2, and a K-quant super-block's prefetches went ~10 %
// faster spread over its work than in one burst. So each plan is timed once
// per process, on first use, on weights flushed from every cache level
// before each call (a model's weights come from DRAM in decode), the plans
// alternating for several rounds, each 8 KiB and 2 KiB ahead. The plan
// measured best on Zen 5 for that type and token count, 8 KiB ahead, is the
// incumbent; another replaces it only when faster by kMargin, so plans that
// tie keep one choice from process to process. The prefetches cannot change
// a result: every plan runs the same arithmetic on the same bytes.
//
// The AVX-512 one_pass of the 32-element types (1-8 tokens; AVX2 panels: 1)
// has another: a thread's rows read as one stream or as two walked in step
// (matmul_gemm.h). At one token each plan is timed reading one and two
// (Q4_0, every line to L2 2 KiB ahead: 27.4 against 24.4 us; taking the
// best plan for one stream and timing it with two missed that pair, page
// starts 2 KiB ahead being a hair faster alone). At more tokens the slice no longer tells them apart
// (Q4_0 at 4 tokens, AMX Xeon: 32.9 against 33.0 us) while a long stream
// from DRAM does (14.7 against 16.3 GB/s), so 2-8 tokens time the plans with
// the one-token count, which then stays unless the other is faster by
// kMargin. On the AMX Xeon two streams decoded 1B Q4_0 2-6 % faster at 1
// thread and 8-13 % at 2, and 4 and 8 sequences 10-25 % faster (2026-12-04).
//
// The K-quant one_pass of 2-8 tokens on the AVX-512 panel kernel has a
// further choice timed with the plan: where a super-block's codes are made
// (KQuantCodes). The two go together because the spread plans prefetch from
// inside the dot products of codes made in place: on the Xeon with AMX, Q6_K
// at 4 tokens ran 28 % faster in place with every line to L1 spread than
// with the best plan through PanelK, and in place with Zen 5's plan gained
// 2 %. Zen 5 kept the codes in PanelK from 2 tokens for Q6_K and from 4 for
// Q5_K; that, with its plan, is the incumbent.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
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

// Zen 5's codes (KQuantCodes): in place up to 8 tokens for Q4_K, 3 for
// Q5_K, 1 for Q6_K (and for Q2_K, Q3_K, as their timings start from).
KQuantCodes zen5_kquant_codes(DType type, int64_t n_tokens) {
  const int64_t in_place_up_to = type == DType::Q4_K ? 8 : type == DType::Q5_K ? 3 : 1;
  return n_tokens <= in_place_up_to ? KQuantCodes::kInPlace : KQuantCodes::kThroughPanel;
}

bool has_codes_choice(Isa isa, DType type, int64_t n_tokens) {
  return traits(type).block_elems == QK_K && n_tokens >= 2 &&
         n_tokens <= kPanelOnePassTokens && panel_isa(isa, type, n_tokens) == Isa::Avx512;
}

// The K-quants read one: level at one token, and at 2-8 tokens two streams
// cost them registers (Q4_K at 4-8 tokens, AMX Xeon: 1B batched decode
// 10-20 % slower).
// The AVX2 panels take two at one token only.
bool has_streams_choice(Isa isa, DType type, int64_t n_tokens) {
  const Isa kernel = panel_isa(isa, type, n_tokens);
  return traits(type).block_elems == 32 && n_tokens <= kPanelOnePassTokens &&
         (kernel == Isa::Avx512 || (kernel == Isa::Avx2 && n_tokens == 1));
}

// A PanelStreaming as one measured choice (MeasuredChoices keeps a small
// enum): ((plan · 2 + codes) · 2 + near) · 2 + two streams.
enum class StreamingId : uint8_t {};
StreamingId id_of(PanelStreaming s) {
  return StreamingId(2 * (2 * (2 * int(s.plan) + int(s.codes)) + int(s.ahead == kPrefetchAheadNear)) +
                     int(s.streams == 2));
}
PanelStreaming streaming_of(StreamingId id) {
  const int i = int(id);
  return {PanelPrefetchPlan(i / 8), i / 2 % 2 ? kPrefetchAheadNear : kPrefetchAheadFar, KQuantCodes(i / 4 % 2),
          i % 2 ? 2 : 1};
}

// `streams`: what the plans are timed with, or 0 to time each with one and
// with two.
PanelStreaming measure(Isa isa, DType type, int64_t n_tokens, int streams, std::string* why) {
  const Kernel kernel = panel_kernel(isa, type, n_tokens);
  const PanelStreaming incumbent{zen5_plan(type, n_tokens), kPrefetchAheadFar, zen5_kquant_codes(type, n_tokens),
                                 std::max(streams, 1)};
  if (panel_isa(isa, type, n_tokens) == Isa::Scalar) {
    *why = "the scalar reference: no prefetches";
    return incumbent;
  }
  std::vector<KQuantCodes> codes{incumbent.codes};
  if (has_codes_choice(isa, type, n_tokens))
    codes.push_back(incumbent.codes == KQuantCodes::kInPlace ? KQuantCodes::kThroughPanel : KQuantCodes::kInPlace);
  // The plans into L1 are timed only where one is the incumbent (the
  // K-quants) and only 8 KiB ahead: the flushed slice rates them well above
  // what they stream from a model's weights. On the AMX Xeon the slice timed
  // every line into L1 2 KiB ahead fastest at 2 tokens of Q4_0 (115 us
  // against 142 for every line into L2 8 KiB ahead) while a 1.1 GiB stream
  // ran it 17 % slower (11.5 against 13.8 GB/s); 8 KiB ahead streamed
  // 10.5-11.1 GB/s there against 14.7-16.1 into L2. On Zen 5 the slice timed
  // every line into L1 8 KiB ahead 7 % faster than the page starts at one
  // token of Q4_0, and 1B Q4_0 then decoded at 30 tok/s instead of 43 (its
  // matrices in turn, a throwaway harness: 22-25 against 38-41 GB/s, Q8_0 24
  // against 41; fast only while the weights cycled through less than ~300 MiB).
  const bool time_l1 = plan_to_l1(incumbent.plan);
  std::vector<PanelStreaming> candidates{incumbent};
  for (size_t ahead : {kPrefetchAheadFar, kPrefetchAheadNear})
    for (PanelPrefetchPlan p : kPlans) {
      if (plan_to_l1(p) && !(time_l1 && ahead == kPrefetchAheadFar)) continue;
      for (KQuantCodes c : codes) {
        // Spread plans prefetch from the dot products of codes made in place;
        // elsewhere they are the same code as their burst twins.
        const bool spreads = may_spread(type) && !(codes.size() > 1 && c == KQuantCodes::kThroughPanel);
        const PanelStreaming s{p, ahead, c, incumbent.streams};
        if (id_of(s) != id_of(incumbent) && (!plan_spreads(p) || spreads)) candidates.push_back(s);
      }
    }
  if (streams == 0) {  // each again, read as two streams
    const size_t one_stream = candidates.size();
    for (size_t i = 0; i < one_stream; ++i) {
      PanelStreaming s = candidates[i];
      s.streams = 2;
      candidates.push_back(s);
    }
  }
  TimingMatmul m(type, n_tokens, WeightLayout::Panels16);
  const auto times = [&](const std::vector<PanelStreaming>& c) {
    return median_times(
        c.size(),
        [&](size_t i) {
          m.args().prefetch = c[i].plan;
          m.args().prefetch_ahead = c[i].ahead;
          m.args().kquant_codes = c[i].codes;
          m.args().streams = c[i].streams;
          m.run(kernel);
        },
        m.weights(), m.weight_bytes());
  };
  const std::vector<double> t = times(candidates);
  PanelStreaming pick = candidates[fastest_unless_incumbent_within(t, kMargin)];  // candidates[0]: the incumbent
  *why = fmt::format("median thread CPU time on {} KiB flushed from the caches:", m.slice_kib());
  for (size_t i = 0; i < candidates.size(); ++i)
    *why += fmt::format("{} {} {} KiB ahead{}{}{} {:.1f} us", i ? "," : "", prefetch_plan_name(candidates[i].plan),
                        candidates[i].ahead / 1024, codes.size() > 1 ? " / codes " : "",
                        codes.size() > 1 ? kquant_codes_name(candidates[i].codes) : "",
                        candidates[i].streams > 1 ? " / 2 streams" : "", t[i] * 1e6);
  if (streams > 0 && has_streams_choice(isa, type, n_tokens)) {
    // The plan picked, read as the other stream count: taken when faster by
    // kMargin.
    PanelStreaming twin = pick;
    twin.streams = 3 - pick.streams;
    const std::vector<double> tt = times({pick, twin});
    if (fastest_unless_incumbent_within(tt, kMargin) == 1) pick = twin;
    *why += fmt::format("; that plan read as {} stream{} (as at one token) {:.1f} us, as {} {:.1f} us", streams,
                        streams > 1 ? "s" : "", tt[0] * 1e6, twin.streams, tt[1] * 1e6);
  }
  return pick;
}

MeasuredChoices<StreamingId> g_streaming;

const char* plan_env_name(PanelPrefetchPlan plan) {
  switch (plan) {
    case PanelPrefetchPlan::kPageStarts: return "page-starts";
    case PanelPrefetchPlan::kLinesToL1: return "l1";
    case PanelPrefetchPlan::kLinesToL2: return "l2";
    case PanelPrefetchPlan::kSpreadToL1: return "spread-l1";
    case PanelPrefetchPlan::kSpreadToL2: return "spread-l2";
  }
  return "?";
}

// SHARDLM_PREFETCH: one plan for every panel matrix in decode, 8 KiB ahead,
// one stream, the incumbent's K-quant codes, instead of the timed choices:
// kernel A/B benchmarks compare kernels, not what each process's timing
// picked (in cache at 4 tokens a K-quant kernel runs 1.5-2x faster with one
// plan than another, and on a shared machine the timing does not pick the
// same one from run to run).
std::optional<PanelPrefetchPlan> plan_from_env() {
  const char* value = std::getenv("SHARDLM_PREFETCH");
  if (!value || !*value) return std::nullopt;
  const std::string_view v(value);
  for (PanelPrefetchPlan p : kPlans)
    if (v == plan_env_name(p)) return p;
  throw Error(fmt::format(
      "environment variable SHARDLM_PREFETCH={}: expected page-starts, l1, l2, spread-l1 or spread-l2", v));
}
// Read once per process, as the timed choices are made once.
const std::optional<PanelPrefetchPlan>& pinned_plan() {
  static const std::optional<PanelPrefetchPlan> pinned = plan_from_env();
  return pinned;
}

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

const char* kquant_codes_name(KQuantCodes codes) {
  return codes == KQuantCodes::kInPlace ? "in place" : "through PanelK";
}

PanelStreaming panel_streaming(Isa isa, DType type, int64_t n_tokens) {
  if (!MeasuredChoices<StreamingId>::timed(type, n_tokens))
    return {PanelPrefetchPlan::kLinesToL1, kPrefetchAheadFar, zen5_kquant_codes(type, n_tokens)};
  if (const auto& pinned = pinned_plan()) return {*pinned, kPrefetchAheadFar, zen5_kquant_codes(type, n_tokens)};
  return streaming_of(g_streaming.get(isa, type, n_tokens, [&](std::string* why) {
    // One token times the stream count with the plan; more take its choice.
    int streams = 1;
    if (has_streams_choice(isa, type, n_tokens)) streams = n_tokens == 1 ? 0 : panel_streaming(isa, type, 1).streams;
    return id_of(measure(isa, type, n_tokens, streams, why));
  }));
}

std::string panel_prefetch_reason(Isa isa, DType type, int64_t n_tokens) {
  if (!MeasuredChoices<StreamingId>::timed(type, n_tokens)) return "prefill: every line into L1";
  if (pinned_plan()) return "SHARDLM_PREFETCH";
  panel_streaming(isa, type, n_tokens);
  return g_streaming.why(isa, type, n_tokens);
}

}  // namespace shardlm::matmul_impl
