// Internal interface between matmul.cpp (activation preparation, row split
// across threads) and the per-ISA kernel files. Not for callers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/matmul.h"

namespace shardlm::matmul_impl {

// Activations for weights with 32-element blocks: q = round(x / d) with
// d = max|x| / 127, and ds = d · Σq so that per-block weight offsets/minimums
// cost one multiply-add instead of a second integer dot product (row-layout
// decode). minus8_sum = −8·Σq is the same term as an integer for the panel
// kernels (AVX2, VNNI, AMX): the offset of Q4_0 (8), Q5_0 (16 = 8·2) and Q8_0
// (128 = 8·16, its codes shifted up by 128; AVX2 takes Q8_0's signed codes as
// they are) times Σq, so that Σ(u − offset)·q is one exact integer sum started
// from this value (a broadcast load; Q5_0/Q8_0 add a shift) instead of a
// float bias term per block and token.
// d is kept at f16 precision (stored as f32 for the kernels): llama.cpp's Q8_0
// activation blocks carry an f16 scale, and rounding ours the same way makes
// Q4_0/Q5_0/Q8_0 logits agree with it instead of drifting by quantization noise.
// Q4_1/Q5_1 take their minimum term from s_f16 instead: llama.cpp's Q8_1
// activation block stores (unrounded d) · Σq rounded to f16, and through a
// few random layers the difference moved logits by 0.15.
struct block_q8_32 {
  float d;
  float ds;
  float s_f16;
  int32_t minus8_sum;
  int8_t qs[32];
};
static_assert(sizeof(block_q8_32) == 48);

// A token's Q8_32 row is its nb blocks followed by three columns of nb floats
// that repeat the blocks' d, ds and s_f16: decode loads four blocks' scales
// with one vector load where gathering them from the blocks cost ~4 uops a
// block, as much as the integer work on a Q4_0 block.
struct Q8_32Columns {
  const float* d;
  const float* ds;
  const float* s_f16;
};
inline Q8_32Columns q8_32_columns(const block_q8_32* row, int64_t nb) {
  const auto* d = reinterpret_cast<const float*>(row + nb);
  return {d, d + nb, d + 2 * nb};
}
// Writes the columns after the nb blocks at `row` (the row must have room:
// act_row_bytes).
void fill_q8_32_columns(block_q8_32* row, int64_t nb);

// K-quants use block_q8_K (core/dtype.h): same rounding over 256 elements,
// bsums[i] = Σ qs[16i .. 16i+16).

inline float round_scale_to_f16(float d) { return f16_to_f32(f32_to_f16(d)); }

// F16 and BF16 weights read f32 activations already rounded to the weight's
// precision, as llama.cpp does (it converts them to F16/BF16 before the dot
// product); this keeps our logits on F16/BF16 models equal to its logits.
enum class ActFormat { F32, F32_AS_F16, F32_AS_BF16, Q8_32, Q8_K };
ActFormat act_format(DType weight_type);
size_t act_row_bytes(ActFormat f, int64_t cols);

void quantize_act_q8_32(const float* x, block_q8_32* out, int64_t cols);
void quantize_act_q8_k(const float* x, block_q8_K* out, int64_t cols);
// Byte-identical AVX2 twins (call only when AVX2 runs).
void quantize_act_q8_32_avx2(const float* x, block_q8_32* out, int64_t cols);
void quantize_act_q8_k_avx2(const float* x, block_q8_K* out, int64_t cols);
// F32_AS_F16 / F32_AS_BF16 activations: x rounded to the weight's precision,
// f16_to_f32(f32_to_f16(x)) / bf16_to_f32(f32_to_bf16(x)); the AVX2 twins
// give the same bits (call only when AVX2 runs).
void round_act_f16(const float* x, float* out, int64_t n);
void round_act_bf16(const float* x, float* out, int64_t n);
void round_act_f16_avx2(const float* x, float* out, int64_t n);
void round_act_bf16_avx2(const float* x, float* out, int64_t n);
// And AVX-512 ones (core/quant_act_avx512.cpp; call only when AVX-512 runs).
void quantize_act_q8_32_avx512(const float* x, block_q8_32* out, int64_t cols);
void quantize_act_q8_k_avx512(const float* x, block_q8_K* out, int64_t cols);

// What a panel kernel prefetches in software ahead of the block it reads
// (matmul_panel_prefetch.h): the start of each 4 KiB page into L1, leaving
// the rest to the core's prefetchers; every line into L1; or every line into
// L2 and the page starts into L1. The K-quants' decode from panels may
// issue a super-block's line prefetches spread over its work (kSpread...)
// instead of in one burst before it. Which streams fastest differs between
// CPUs, so matmul_prefetch_plan.cpp times them; the result's bits are the
// same under each.
enum class PanelPrefetchPlan : uint8_t { kPageStarts, kLinesToL1, kLinesToL2, kSpreadToL1, kSpreadToL2 };
// How far ahead of the block being read a plan's prefetches go, timed with
// the plan: at least one DRAM latency (~100-150 ns) times what one core
// streams (20-60 GB/s) is ~2-9 KB. Zen 5 streamed best 8 KiB ahead (2 KiB:
// K-quants 10-20 % slower); a Xeon with AMX streamed Q4_0 and Q4_K 7-9 %
// faster 2 KiB ahead, Q6_K 14 % slower.
constexpr size_t kPrefetchAheadFar = 8192, kPrefetchAheadNear = 2048;
const char* prefetch_plan_name(PanelPrefetchPlan plan);
constexpr bool plan_spreads(PanelPrefetchPlan plan) {
  return plan == PanelPrefetchPlan::kSpreadToL1 || plan == PanelPrefetchPlan::kSpreadToL2;
}
constexpr bool plan_to_l1(PanelPrefetchPlan plan) {
  return plan == PanelPrefetchPlan::kLinesToL1 || plan == PanelPrefetchPlan::kSpreadToL1;
}

// How the VNNI one_pass of the 32-element types (2-8 tokens) gives vpdpbusd
// a token's activation codes: codes 0-15 as one 16-byte load spread to each
// dword by vpshufd and the rest broadcast from memory, or every dword
// broadcast from memory. The spread saves loads where loads bound the loop
// (Zen 5); where the shuffles take a port vpdpbusd needs (Xeon with AMX),
// the broadcasts are faster. matmul_activation_loads.cpp times them; the
// integer sums, and so the bits, are the same under each.
enum class ActivationLoads : uint8_t { kSpreadQuad, kBroadcast };
const char* activation_loads_name(ActivationLoads loads);

// Where the VNNI one_pass of a K-quant from panels (1-8 tokens) makes a
// super-block's 64 code vectors: written to a PanelK and read back by the
// dot products, or made where the dot products take them, with more
// registers live. CPUs differ (Zen 5: Q6_K in place at 8 tokens 23 % slower;
// a Xeon with AMX: Q5_K and Q6_K in place 16-33 % faster at 2-8 tokens).
// matmul_prefetch_plan.cpp times them with the prefetch plans; the bits are
// the same under each.
enum class KQuantCodes : uint8_t { kThroughPanel, kInPlace };
const char* kquant_codes_name(KQuantCodes codes);

struct KernelArgs {
  const MatrixView* w;
  const void* x;      // n_tokens rows of activations in act_format(w->type)
  size_t x_stride;    // bytes between tokens
  int64_t n_tokens;
  float* y;           // y[t * w->rows + r]
  PanelPrefetchPlan prefetch = PanelPrefetchPlan::kLinesToL1;  // Panels16 only
  size_t prefetch_ahead = kPrefetchAheadFar;                    // Panels16 only
  ActivationLoads activations = ActivationLoads::kSpreadQuad;
  KQuantCodes kquant_codes = KQuantCodes::kInPlace;  // K-quant one_pass on panels
  int streams = 1;  // AVX-512 one_pass on panels: rows read as 1 or 2 streams (matmul_gemm.h)
};

// Computes rows [r0, r1) of every token. matmul.cpp starts every thread's
// range at a multiple of kRowAlign, so a kernel's row tiling (a function of
// the row index only) is the same whatever the thread count. (The float
// decode kernels group rows by their place in the range instead, and give
// each row the same arithmetic in any group: tested.)
using Kernel = void (*)(const KernelArgs& args, int64_t r0, int64_t r1);
constexpr int64_t kRowAlign = 16;

// nullptr when that ISA has no kernel of its own for the type.
Kernel scalar_kernel(DType type);
Kernel avx2_kernel(DType type);
Kernel avx2_kquant_kernel(DType type);
Kernel avx512_kernel(DType type);
Kernel avx512_kquant_kernel(DType type);
Kernel amx_kernel(DType type);

// Prefill and batched decode: kernels for n_tokens >= kGemmMinTokens that
// reuse each unpacked weight panel across many tokens (matmul_gemm_avx512.cpp).
constexpr int64_t kGemmMinTokens = 4;
Kernel avx512_gemm_kernel(DType type);
// F32, F16, BF16 (matmul_float_gemm.h).
Kernel avx2_float_gemm_kernel(DType type);
Kernel avx512_float_gemm_kernel(DType type);
// BF16 by vdpbf16ps (bf16_pairs: the CPU must have AVX512_BF16) or widened to
// f32 (CPUs without it); the one-argument form picks by the CPU.
Kernel avx512_float_gemm_kernel(DType type, bool bf16_pairs);
Kernel amx_gemm_kernel(DType type);

// Kernels for WeightLayout::Panels16 matrices, any token count (nullptr for
// types without that layout or when the ISA lacks VNNI / AMX; AMX from
// kGemmMinTokens on; AVX2: every type with the layout).
Kernel scalar_panel_kernel(DType type);
Kernel avx2_panel_kernel(DType type);  // the AVX-VNNI form of the 32-element types where avx_vnni_active()
Kernel avx2_panel_kernel(DType type, bool vnni);  // that form or the maddubs one (vnni: the CPU must have AVX-VNNI)
Kernel avx2_kquant_panel_kernel(DType type);  // Q4_K, Q5_K, Q6_K; avx2_panel_kernel hands them on
Kernel avx512_panel_kernel(DType type);
Kernel amx_panel_kernel(DType type);

// Rows in a Panels16 group (matmul.h's WeightLayout::Panels16).
constexpr int64_t kPanelRows = 16;

// Where a Panels16 block of `type` keeps its 2-byte piece (the byte offset
// of that f16 in the GGUF block), or kNoOddPiece when the block is whole
// dwords. Every piece starting at byte o of the block is stored at 16·o of
// the group's panel block (matmul_panels.cpp).
constexpr size_t kNoOddPiece = ~size_t(0);
size_t panel_odd_piece(DType type);
constexpr size_t panel_odd_piece(size_t block_bytes, int64_t block_elems) {
  if (block_bytes % 4 != 2) return kNoOddPiece;
  return block_elems == QK_K ? block_bytes - 2 : 0;
}

// The ISA whose panel kernel matmul runs on a Panels16 matrix with the
// kernels of `isa` (Scalar: the reference on panels), and that kernel.
Isa panel_isa(Isa isa, DType type, int64_t n_tokens);
Kernel panel_kernel(Isa isa, DType type, int64_t n_tokens);
// Token counts the VNNI kernels take in one pass per row group (matmul_gemm.h).
constexpr int64_t kPanelOnePassTokens = 8;
// How panel_kernel(isa, type, n_tokens) streams fastest on this CPU: its
// prefetch plan and distance, (the VNNI one_pass of a K-quant) where it
// makes its codes, and (the AVX-512 one_pass) in how many streams it reads
// a thread's rows. For decode and batched decode (1-15 tokens) timed once
// per process on first use; for prefill (panels unpacked once for many
// tokens, not streamed) every line into L1, 8 KiB ahead. The codes are timed
// with the plan where there is a choice (Q4_K, Q5_K, Q6_K panels, 2-8
// tokens, the AVX-512 panel kernel), elsewhere what Zen 5 ran fastest (in
// place up to 8 tokens for Q4_K, 3 for Q5_K, 1 for Q6_K), which a timing
// must also beat. And what decided it, in words.
struct PanelStreaming {
  PanelPrefetchPlan plan;
  size_t ahead;
  KQuantCodes codes;
  int streams = 1;
};
PanelStreaming panel_streaming(Isa isa, DType type, int64_t n_tokens);
std::string panel_prefetch_reason(Isa isa, DType type, int64_t n_tokens);
// The activation loads the VNNI one_pass runs fastest with here for `type`
// at `n_tokens` tokens under the kernels of `isa`: timed once per process on
// first use where there is a choice (a 32-element type, 2-8 tokens, the
// AVX-512 panel kernel), kSpreadQuad elsewhere. And what decided it.
ActivationLoads activation_loads(Isa isa, DType type, int64_t n_tokens);
std::string activation_loads_reason(Isa isa, DType type, int64_t n_tokens);

// The kernel `isa`'s own files bring for `type` at `n_tokens` tokens (the
// prefill kernels from kGemmMinTokens on), or nullptr (none, or the ISA cannot
// run here).
Kernel own_kernel(Isa isa, DType type, int64_t n_tokens);
// The newest ISA up to `cap` with its own kernel for `type` (scalar if none).
Isa newest_isa(Isa cap, DType type, int64_t n_tokens);
// What matmul() runs for `type` and `n_tokens` under the cap: for decode and
// batched decode (1-15 tokens) the ISA whose kernel measured fastest on this
// CPU among those giving the same bits (matmul_dispatch.cpp), for prefill the
// newest.
Isa dispatch_isa(Isa cap, DType type, int64_t n_tokens);
// What decided dispatch_isa's answer, in words (the timings, or why none).
std::string dispatch_reason(Isa cap, DType type, int64_t n_tokens);
// With `--log-level debug` (spdlog), one line per matrix class (type,
// layout, shape, token count) saying which kernel matmul() runs on it and
// why: the first time it runs. `isa` is the kernels' ISA (for Panels16: the
// cap panel_kernel got).
void log_matmul_kernel(const MatrixView& w, int64_t n_tokens, Isa isa);
// Whether every ISA's decode kernel for `type` gives the same bits (the
// quantized types: exact integer sums), so the dispatcher may time them.
bool decode_bits_match_across_isas(DType type);

}  // namespace shardlm::matmul_impl
