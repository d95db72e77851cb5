// Small vector operations of a transformer layer, on contiguous f32 arrays.
// Each has a scalar reference (ops::ref, core/ops_impl.h) that defines the
// numerics; rms_norm, softmax, silu, swiglu, add, mul and dot also have AVX2
// paths chosen at run time by active_isa() (core/cpu.h). Unless a function says
// otherwise, out may alias an input (in-place use), but partial overlap is not
// allowed. Lengths n ≥ 0; n == 0 is a no-op.
#pragma once

#include <cstdint>

#include "core/cpu.h"

namespace shardlm::ops {

// out[i] = x[i] / sqrt(mean(x²) + eps) · weight[i]; weight may be null (= 1).
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);

// x = exp(x - max) / Σ exp(x - max), in place. -inf entries (masked scores)
// become 0; at least one entry must be finite.
void softmax(float* x, int64_t n);

// out = x · sigmoid(x).
void silu(const float* x, float* out, int64_t n);
// out = silu(gate) · up (the gated FFN activation).
void swiglu(const float* gate, const float* up, float* out, int64_t n);

void add(const float* a, const float* b, float* out, int64_t n);  // out = a + b
void mul(const float* a, const float* b, float* out, int64_t n);  // out = a · b
void scale(float* x, float s, int64_t n);                        // x *= s
float dot(const float* a, const float* b, int64_t n);            // Σ a·b
void axpy(float a, const float* x, float* y, int64_t n);          // y += a · x

// Index of the largest of x[0..n): the lowest index among equals; NaNs are
// never picked, and when nothing is above -inf (or n == 0) the answer is 0.
// AVX-512 and AVX2 paths (a lane keeps its first maximum, the lanes' ties go
// to the lowest index), so every path gives the reference's index.
int64_t argmax(const float* x, int64_t n);

// The first i < n with x[i] > floor (NaN never is), or n: skips the run of
// values a selection with that floor rejects. AVX-512 and AVX2 paths.
int64_t find_above(const float* x, int64_t n, float floor);

// Attention of n_q query heads that share one cached K/V head (grouped-query
// attention): for each g < n_q, out_g = Σ_p softmax_p(scale · q_g·k_p) · v_p
// over p < n_pos, with q_g at q + g·dim_k, k_p at element p·k_stride of k,
// v_p at element p·v_stride of v, out_g at out + g·dim_v. Each K row is
// loaded once for all n_q heads (V rows once per head, mostly from cache).
// scores: n_q · n_pos floats of scratch.
struct KvHead {
  const void* k;  // f32 elements, or f16 when `f16`
  const void* v;
  int64_t k_stride, v_stride;
  int64_t dim_k, dim_v;
  bool f16 = false;
};
// The order in which attention of one token adds: Fastest, its own (each
// dot product over lanes of dimensions, then across them); AsBlocks, each
// dot product's multiply-adds in dimension order and the softmax's sum in
// position order, as a lane of the blocked prefill kernels (attend_tokens)
// takes them, so a token gets the same bits attended alone or among others
// (batch invariance: what a server of several sequences needs); it costs
// decode attention from a long cache (Zen 5: AVX-512 1-30 %, AVX2 17-55 %;
// docs/BENCHMARKS.md). The scalar path is per token either way.
enum class SumOrder { Fastest, AsBlocks };
void attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores,
            float* out, SumOrder order = SumOrder::Fastest);
// attend on one ISA's path (benchmarks): false, with nothing done, where this
// CPU lacks it or it does not take the shape (AVX-512: head dimensions in
// multiples of 16). attend_isa: the path attend takes for this shape.
bool attend_with_isa(Isa isa, const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale,
                     float* scores, float* out, SumOrder order = SumOrder::Fastest);
Isa attend_isa(const KvHead& kv);

// attend for n_tok consecutive tokens of one sequence (prefill): token i has
// its n_q queries at q + i·q_stride, its outputs at out + i·out_stride, and
// sees the first n_pos + i cached positions. With AVX2 or AVX-512, while
// n_tok · n_q ≤ kAttendLanes and the head dimensions are multiples of 16,
// the block is one matmul-shaped pass that reads each cached row once for
// several of its queries; both ISAs give the same bits, and a token's result
// does not depend on which other tokens share the block; otherwise (and for
// one token: decode) it is attend per token in `order` (with AsBlocks, the
// same bits as a block's). scores: what attend needs for one token.
constexpr int64_t kAttendLanes = 32;
void attend_tokens(const float* q, int64_t q_stride, int64_t n_tok, int64_t n_q, const KvHead& kv, int64_t n_pos,
                   float scale, float* scores, float* out, int64_t out_stride, SumOrder order = SumOrder::Fastest);

// Rotary position embedding.
// Which elements rotate together: llama.cpp's "normal" mode pairs
// (x[2i], x[2i+1]) — llama; NeoX mode pairs (x[i], x[i + n_rot/2]) — qwen2, ...
enum class RopeStyle { AdjacentPairs, NeoxHalves };

struct RopeParams {
  int head_dim = 0;
  int n_rot = 0;               // leading dimensions rotated per head (even, ≤ head_dim)
  float freq_base = 10000.f;
  float freq_scale = 1.f;      // linear context scaling: angles are multiplied by it
  const float* freq_factors = nullptr;  // n_rot/2 divisors of the pair frequencies (Llama-3.1 rope_freqs), or null
  RopeStyle style = RopeStyle::AdjacentPairs;
  // YaRN: pair i mixes its unscaled angle (weight ramp_i) with the scaled one
  // (1 − ramp_i), ramp_i = 1 − clamp((i − corr_low) / max(0.001, corr_high − corr_low), 0, 1);
  // cos and sin are multiplied by magnitude.
  bool yarn = false;
  float yarn_corr_low = 0.f, yarn_corr_high = 0.f;
  float magnitude = 1.f;
};

// Pair i of every head turns by θ_i = freq_scale · pos · base^(−2i/n_rot) / factor_i
// (YaRN: see RopeParams). Dimensions n_rot..head_dim pass through. x holds
// n_heads heads of head_dim.
// Throws Error when n_rot is odd, negative or larger than head_dim.
void rope(float* x, int n_heads, const RopeParams& p, int64_t pos);

// rope in two steps, for callers that turn many heads by one position's
// angles (a model's queries and keys in every layer): rope_angles writes the
// n_rot values (cos θ_i, sin θ_i) of position pos, which depend on neither
// head_dim nor the heads (it throws only for an odd or negative n_rot);
// rope_rotate turns n_heads heads by them.
void rope_angles(const RopeParams& p, int64_t pos, float* cos_sin);
void rope_rotate(float* x, int n_heads, const RopeParams& p, const float* cos_sin);

// YaRN's correction range: the pairs whose wavelength fits between beta_fast
// and beta_slow rotations over the original context, as [floor(low), ceil(high)]
// clamped to [0, n_rot − 1].
void yarn_correction_range(int n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                           float* low, float* high);

}  // namespace shardlm::ops
