// Weight × activation products, the hot loop of every forward pass.
//   y[t][r] = Σ_k W[r][k] · x[t][k]   for t < n_tokens, r < rows
// W is a row-major matrix of any compute DType (rows of `cols` elements, as in
// GGUF: ne0 = cols, ne1 = rows). x and y are f32, row-major per token.
// n_tokens == 1 is matrix × vector (decode); larger is matrix × matrix.
//
// Numerics: F32 weights multiply the f32 activations directly; F16/BF16
// weights multiply activations rounded to F16/BF16 (as llama.cpp does).
// Quantized weights multiply activations that are quantized once per call
// (or once per PreparedInput) to 8-bit blocks with an f32 scale: blocks of 32
// for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, blocks of 256 with 16-element sums for the
// K-quants. Products are exact integer sums per block, scaled in f32.
// Every output element is computed by one thread in a fixed order, so results
// do not depend on the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace shardlm {

// How a matrix's blocks are laid out in memory.
//   Rows: GGUF's, each row its blocks in order (row_stride bytes apart).
//   Panels16: rows in groups of 16, each group the same bytes as its 16 rows
//     (so a group starts at row(16g)), but stored block by block: block b of
//     the group holds each piece of the GGUF block (its dwords, and the one
//     2-byte f16 of Q4_0, Q5_0, Q8_0 at the start or of Q3_K, Q6_K at the end) for
//     all 16 rows side by side, a piece at byte o of the block at 16·o (dword
//     k of the 16 rows is then 64 contiguous bytes). That is the register
//     layout of the prefill / batched kernels' panels, so they load it instead
//     of gathering 16 rows and transposing (matmul_gemm.h, matmul_panels.cpp).
enum class WeightLayout : uint8_t { Rows, Panels16 };

struct MatrixView {
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_stride = 0;  // bytes between rows (normally row_bytes(type, cols))
  WeightLayout layout = WeightLayout::Rows;

  // Rows layout: row r. Panels16: the group holding row r, if r % 16 == 0.
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + size_t(r) * row_stride; }
};

// Whether a token's products may depend on how many tokens share the call.
// The Panels16 kernels give a row the same bits for any count; other
// matrices take other kernels, and ISAs, from two tokens on. AsOneToken
// multiplies those a token at a time, with the one-token kernel, when they
// hold at most kOneTokenMaxBytes (a mixture of experts' router, a tiny
// model's matrices: read from cache once per token); larger ones still take
// the batched kernels (Model::warn_unless_batch_invariant names them).
enum class TokenSums : uint8_t { Fastest, AsOneToken };
inline constexpr size_t kOneTokenMaxBytes = size_t(16) << 20;

// y = W · x for n_tokens activation vectors. pool may be null (single thread).
// `then`: the matrix the caller multiplies next, if known. With two or more
// threads, each prefetches the start of its share of it instead of idling at
// the end of this product and through the caller's work before the next
// (ThreadPool::run); the result does not change.
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool,
            const MatrixView* then = nullptr, TokenSums sums = TokenSums::Fastest);

// Activations shared by several matrices with the same input (e.g. Q, K and V
// projections): each 8-bit form is made on first use and reused after. x must
// outlive this object and not change. Not for concurrent use.
class PreparedInput {
 public:
  PreparedInput(const float* x, int64_t n_tokens, int64_t cols, TokenSums sums = TokenSums::Fastest);

  const float* data() const { return x_; }
  int64_t n_tokens() const { return n_tokens_; }
  int64_t cols() const { return cols_; }
  TokenSums sums() const { return sums_; }

  // Activations in the form `type`'s kernels read, and the bytes between tokens.
  const void* for_type(DType type, ThreadPool* pool, size_t* token_stride);

 private:
  const float* x_;
  int64_t n_tokens_;
  int64_t cols_;
  TokenSums sums_;
  std::vector<uint8_t> q8_32_, q8_k_;  // empty until first needed
  std::vector<float> as_f16_, as_bf16_;
};

void matmul(const MatrixView& w, PreparedInput& x, float* y, ThreadPool* pool, const MatrixView* then = nullptr);

// Several matrices times the same activations in one job of the threads (a
// layer's q, k and v; gate and up): each thread takes its chunks of one
// matrix, then of the next, so the threads meet once, not once a matrix.
// Each y gets what matmul(w, x, y, pool) gives it, to the bit.
struct MatmulTarget {
  const MatrixView* w;
  float* y;
};
void matmul_many(std::span<const MatmulTarget> targets, PreparedInput& x, ThreadPool* pool,
                 const MatrixView* then = nullptr);

// Whether, with TokenSums::AsOneToken, w gives a token the same bits for any
// number of tokens in the call: its panel kernels do, and a row-major matrix
// of at most kOneTokenMaxBytes goes a token at a time.
bool same_bits_as_one_token(const MatrixView& w);
// Whether x's products with w go a token at a time (TokenSums::AsOneToken).
bool one_token_at_a_time(const MatrixView& w, const PreparedInput& x);

// Makes now each kernel choice that matmul() times once per process on first
// use (the ISA of a Rows matrix, a panel kernel's prefetches, its activation
// loads) for matrices of w's type and layout, at every token count it times,
// so that no later product waits for a timing: a mixture-of-experts prompt
// meets most counts from 1 to 15 in its first step (~0.1 s a K-quant type).
void time_kernel_choices(const MatrixView& w);

// What the threads of `pool` prefetch of w (null: nothing) as a `then`: for
// another job of the pool that a matmul of w follows (ThreadPool::run).
std::vector<ThreadPool::Prefetch> matmul_prefetches(const MatrixView* w, ThreadPool* pool);

// Same with the kernels of one instruction set (types it does not specialise
// use the next lower one). For tests and benchmarks; throws shardlm::Error if
// this CPU/OS cannot run `isa`.
void matmul_with_isa(Isa isa, const MatrixView& w, PreparedInput& x, float* y, ThreadPool* pool);

// Whether `isa` runs here and has its own kernel for `type` (rather than a
// lower ISA's).
bool isa_has_kernel(Isa isa, DType type);
// The same for one token count (decode and prefill kernels differ).
bool isa_has_kernel(Isa isa, DType type, int64_t n_tokens);

// Whether repacking `w` to WeightLayout::Panels16 (repack_panels) pays on
// this CPU: a type with a panel kernel for the active ISA (AVX-512 VNNI
// and AVX2: the 32-element block types, Q2_K to Q6_K), rows a
// multiple of 16 and stored contiguously.
bool panels_pay(const MatrixView& w);
// Writes w (Rows layout, rows % 16 == 0) in the Panels16 layout to `out`
// (rows × row_bytes(type, cols) bytes; may not overlap w).
void repack_panels(const MatrixView& w, uint8_t* out);
// Rows [16g, 16g + 16) of a Panels16 matrix in the Rows layout into `out`
// (16 × row_bytes bytes).
void unpack_panel_group(const MatrixView& w, int64_t g, uint8_t* out);

// Row r of a Panels16 matrix in the Rows layout into `out` (row_bytes
// bytes): the embedding lookup of a tied output matrix that was repacked.
void read_panel_row(const MatrixView& w, int64_t r, uint8_t* out);

// The ISA whose kernel matmul() runs for `type` and `n_tokens` here: for
// decode (1-3 tokens) the one that measured fastest on this CPU (timed once
// per type and token count, on first use), for prefill the newest.
Isa matmul_kernel_isa(DType type, int64_t n_tokens);
// The ISA whose kernels matmul_with_isa(cap, ...) runs on a Panels16 matrix
// of `type` at `n_tokens` tokens (Scalar: the reference on panels).
Isa panel_kernel_isa(Isa cap, DType type, int64_t n_tokens);
// What that kernel prefetches ("lines to L1, spread, 8 KiB ahead"): the plan
// timed on this CPU (or SHARDLM_PREFETCH's), for `bench kernels` rows.
std::string panel_prefetch_summary(Isa cap, DType type, int64_t n_tokens);

}  // namespace shardlm
