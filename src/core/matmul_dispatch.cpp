// Which ISA's kernel matmul() runs on a Rows-layout matrix. (A model's
// matrices are mostly Panels16 copies where AVX-512 VNNI runs: those take
// panel_kernel, not this choice.) The newest ISA is not always the fastest
// for decode: 512-bit work has two vector ports where 256-bit work has three,
// some CPUs split 512-bit instructions in two, and memory-bound rows gain
// nothing from wider vectors. So for 1-15 tokens every ISA up to the cap that
// brings its own kernel for the type is timed once, on first use, twice:
// the way decode runs it, on weights flushed from every cache level before
// each call (a model's weights come from DRAM), and on the same weights hot
// in L2 (the kernels' instruction cost). Each time the candidates alternate
// for several rounds, so that a slow spell (clock, the sibling thread, the
// other vCPU's traffic) hits all of them, scored by the median round. Going
// from the oldest ISA to the newest, a kernel replaces the choice so far when
// it streams faster by kStreamMargin, or, streaming within that of it (bound
// by memory: the weights set the pace, and streamed timings are the noisier),
// when it is faster hot by kMargin: fewer instructions for the same bytes
// leave the core to other work. Otherwise the older stays, so kernels that
// tie get the same choice in every process. (Timed streamed alone, a tie at
// the memory bound went either way from process to process.) The choice holds for the
// life of the process: a type and token count always run the same kernel,
// so results do not change between steps or with the thread count; nothing
// is persisted.
// Only the quantized types are timed: their kernels sum integers exactly and
// give the same bits on every ISA (tested), so which one wins cannot change a
// result. Float weights sum in a different order on each ISA, so a timing
// that went one way in one run and the other way in the next would make the
// same seed give another text; they follow a fixed rule instead, the
// outcome of the rule above measured once (Zen 5, docs/bench/flt5.md):
// decode (1-3 tokens) runs the AVX2 kernel, whose rows stream from DRAM as
// fast as AVX-512's or faster (1 token: AVX2 1-7 % ahead; 2: 2-15 %; 3:
// F32 AVX2 10 % ahead, F16/BF16 AVX-512 5-8 %), so AVX-512's lead hot (F16/
// BF16 at 2-3 tokens) does not count: decode streams. Prefill takes the newest.
//
// Batches of kGemmMinTokens..15 tokens (batched decode) choose the same way
// between the panel kernels that share their arithmetic: the AVX-512 VNNI
// tiles and the AMX tile of that many rows give the same bits (exact integer
// sums, the same scaling), and which is faster depends on the token count
// (AMX's per-block cost is fixed, VNNI's grows with the tokens). The AVX2
// tiles sum in another order and are not candidates there. Larger batches
// (prefill) take the newest ISA.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/matmul.h"
#include "core/matmul_kernels.h"
#include "core/matmul_timing.h"

namespace shardlm::matmul_impl {
namespace {

constexpr double kStreamMargin = 0.10;
constexpr double kMargin = 0.05;

// Sets *timings to what decided, for the kernel log (matmul_kernel_log.cpp).
Isa calibrate(Isa cap, DType type, int64_t n_tokens, std::string* timings) {
  std::vector<Isa> isas;
  std::vector<Kernel> kernels;
  // The AVX2 tiles (4+ tokens) do not give the panel kernels' bits.
  const Isa oldest = n_tokens >= kGemmMinTokens ? Isa::Avx512 : Isa::Avx2;
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Amx}) {
    if (isa > cap || isa < oldest) continue;
    if (const Kernel k = own_kernel(isa, type, n_tokens)) {
      isas.push_back(isa);
      kernels.push_back(k);
    }
  }
  if (kernels.size() < 2) {
    *timings = "the only candidate";
    return newest_isa(cap, type, n_tokens);
  }
  const TimingMatmul m(type, n_tokens, WeightLayout::Rows);
  const auto run = [&](size_t i) { m.run(kernels[i]); };
  const std::vector<double> streamed = median_times(kernels.size(), run, m.weights(), m.weight_bytes());
  const std::vector<double> hot = median_times(kernels.size(), run);
  size_t pick = 0;
  for (size_t i = 1; i < kernels.size(); ++i) {
    const bool streams_faster = streamed[i] < streamed[pick] * (1.0 - kStreamMargin);
    const bool streams_as_fast = streamed[i] <= streamed[pick] * (1.0 + kStreamMargin);
    if (streams_faster || (streams_as_fast && hot[i] < hot[pick] * (1.0 - kMargin))) pick = i;
  }
  *timings = fmt::format("median thread CPU time on {} KiB, flushed from the caches / hot:", m.slice_kib());
  for (size_t i = 0; i < kernels.size(); ++i)
    *timings += fmt::format(" {} {:.1f} / {:.1f} us", isa_name(isas[i]), streamed[i] * 1e6, hot[i] * 1e6);
  return isas[pick];
}

MeasuredChoices<Isa> g_choices;  // per cap, type and token count

// The fixed rule for float weights (see the top of the file).
bool float_decode_keeps_avx2(Isa cap, DType type, int64_t n_tokens) {
  return n_tokens >= 1 && n_tokens <= 3 && !decode_bits_match_across_isas(type) && cap >= Isa::Avx2 &&
         own_kernel(Isa::Avx2, type, n_tokens) != nullptr;
}

bool timed(DType type, int64_t n_tokens) {
  return MeasuredChoices<Isa>::timed(type, n_tokens) && decode_bits_match_across_isas(type);
}

}  // namespace

bool decode_bits_match_across_isas(DType type) { return traits(type).block_elems > 1; }

Isa dispatch_isa(Isa cap, DType type, int64_t n_tokens) {
  if (float_decode_keeps_avx2(cap, type, n_tokens)) return Isa::Avx2;
  if (!timed(type, n_tokens)) return newest_isa(cap, type, n_tokens);
  return g_choices.get(cap, type, n_tokens, [&](std::string* why) { return calibrate(cap, type, n_tokens, why); });
}

std::string dispatch_reason(Isa cap, DType type, int64_t n_tokens) {
  if (float_decode_keeps_avx2(cap, type, n_tokens))
    return "float weights, 1-3 tokens: avx2 (fixed: streams as fast as avx512 or faster, docs/bench/flt5.md)";
  if (!timed(type, n_tokens)) return n_tokens > kTimedTokens ? "prefill: the newest ISA" : "not timed: the newest ISA";
  dispatch_isa(cap, type, n_tokens);
  return g_choices.why(cap, type, n_tokens);
}

}  // namespace shardlm::matmul_impl
