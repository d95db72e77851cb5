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
#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <emmintrin.h>
#include <fmt/format.h>
#include <time.h>

#include "core/matmul.h"
#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

constexpr int kTimedTokens = 15;       // 1..15 tokens: decode and batched decode
constexpr int kTypeIds = 64;           // DType ids are below this
constexpr int64_t kCols = 4096;        // a multiple of every block size
constexpr size_t kSliceBytes = 512 << 10;  // ≫ the prefetchers' reach, a fraction of a ms from DRAM
constexpr int kRounds = 11;                 // odd: the median is one round's time
constexpr double kStreamMargin = 0.10;
constexpr double kMargin = 0.05;

// CPU time of the calling thread: time the thread was not running (a shared
// machine) does not count against a kernel.
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Writes every cache line of [p, p + n) back and out of every cache level.
void flush_from_caches(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i += 64) _mm_clflush(p + i);
  _mm_mfence();
}

// Median time of each kernel over rows [0, rows), in rounds that alternate
// between the candidates; with `streamed` its weights are flushed from the
// caches before every call.
std::vector<double> time_candidates(const std::vector<Kernel>& kernels, const KernelArgs& args, int64_t rows,
                                    bool streamed) {
  const auto* weights = static_cast<const uint8_t*>(args.w->data);
  const size_t bytes = args.w->row_stride * size_t(rows);
  std::vector<std::vector<double>> samples(kernels.size());
  for (int round = -1; round < kRounds; ++round) {  // round -1 warms code, clocks and the activations
    for (size_t i = 0; i < kernels.size(); ++i) {
      if (streamed) flush_from_caches(weights, bytes);
      const double t0 = thread_seconds();
      kernels[i](args, 0, rows);
      const double s = thread_seconds() - t0;
      if (round >= 0) samples[i].push_back(s);
    }
  }
  std::vector<double> median(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::nth_element(samples[i].begin(), samples[i].begin() + kRounds / 2, samples[i].end());
    median[i] = samples[i][kRounds / 2];
  }
  return median;
}

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
  // Any bytes make valid weights except float NaNs and denormals (slow
  // paths): 0x3C repeated is ~1 as f16/bf16 and ~0.01 as f32, and a sane
  // f16 scale for every block type.
  const size_t stride = row_bytes(type, kCols);
  const int64_t rows = std::max<int64_t>(kRowAlign, int64_t(kSliceBytes / stride) / kRowAlign * kRowAlign);
  std::vector<uint8_t> weights(stride * size_t(rows), 0x3C);
  const MatrixView w{type, weights.data(), rows, kCols, stride};
  std::vector<float> x(size_t(n_tokens * kCols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 13) - 6) * 0.1f;
  std::vector<float> y(size_t(n_tokens * rows));
  PreparedInput prepared(x.data(), n_tokens, kCols);
  KernelArgs args;
  args.w = &w;
  args.x = prepared.for_type(type, nullptr, &args.x_stride);
  args.n_tokens = n_tokens;
  args.y = y.data();
  const std::vector<double> streamed = time_candidates(kernels, args, rows, true);
  const std::vector<double> hot = time_candidates(kernels, args, rows, false);
  size_t pick = 0;
  for (size_t i = 1; i < kernels.size(); ++i) {
    const bool streams_faster = streamed[i] < streamed[pick] * (1.0 - kStreamMargin);
    const bool streams_as_fast = streamed[i] <= streamed[pick] * (1.0 + kStreamMargin);
    if (streams_faster || (streams_as_fast && hot[i] < hot[pick] * (1.0 - kMargin))) pick = i;
  }
  *timings = fmt::format("median thread CPU time on {} KiB, flushed from the caches / hot:", kSliceBytes >> 10);
  for (size_t i = 0; i < kernels.size(); ++i)
    *timings += fmt::format(" {} {:.1f} / {:.1f} us", isa_name(isas[i]), streamed[i] * 1e6, hot[i] * 1e6);
  return isas[pick];
}

// 0 = not yet measured, else Isa + 1; per cap, type id and token count.
std::array<std::atomic<int8_t>, 4 * kTypeIds * kTimedTokens> g_choice{};
std::mutex g_calibrating;
std::map<size_t, std::string> g_timings;  // per slot of g_choice, under g_calibrating

size_t slot_of(Isa cap, DType type, int64_t n_tokens) {
  return (size_t(cap) * kTypeIds + size_t(type)) * kTimedTokens + size_t(n_tokens - 1);
}

// The fixed rule for float weights (see the top of the file).
bool float_decode_keeps_avx2(Isa cap, DType type, int64_t n_tokens) {
  return n_tokens >= 1 && n_tokens <= 3 && !decode_bits_match_across_isas(type) && cap >= Isa::Avx2 &&
         own_kernel(Isa::Avx2, type, n_tokens) != nullptr;
}

bool timed(DType type, int64_t n_tokens) {
  return n_tokens >= 1 && n_tokens <= kTimedTokens && size_t(type) < size_t(kTypeIds) &&
         decode_bits_match_across_isas(type);
}

}  // namespace

bool decode_bits_match_across_isas(DType type) { return traits(type).block_elems > 1; }

Isa dispatch_isa(Isa cap, DType type, int64_t n_tokens) {
  if (float_decode_keeps_avx2(cap, type, n_tokens)) return Isa::Avx2;
  if (!timed(type, n_tokens)) return newest_isa(cap, type, n_tokens);
  std::atomic<int8_t>& slot = g_choice[slot_of(cap, type, n_tokens)];
  if (const int8_t c = slot.load(std::memory_order_acquire)) return Isa(c - 1);
  const std::lock_guard<std::mutex> lock(g_calibrating);
  if (const int8_t c = slot.load(std::memory_order_relaxed)) return Isa(c - 1);
  const Isa isa = calibrate(cap, type, n_tokens, &g_timings[slot_of(cap, type, n_tokens)]);
  slot.store(int8_t(int(isa) + 1), std::memory_order_release);
  return isa;
}

std::string dispatch_reason(Isa cap, DType type, int64_t n_tokens) {
  if (float_decode_keeps_avx2(cap, type, n_tokens))
    return "float weights, 1-3 tokens: avx2 (fixed: streams as fast as avx512 or faster, docs/bench/flt5.md)";
  if (!timed(type, n_tokens)) return n_tokens > kTimedTokens ? "prefill: the newest ISA" : "not timed: the newest ISA";
  dispatch_isa(cap, type, n_tokens);
  const std::lock_guard<std::mutex> lock(g_calibrating);
  return g_timings[slot_of(cap, type, n_tokens)];
}

}  // namespace shardlm::matmul_impl
