#include "core/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/matmul_kernels.h"
#include "core/matmul_timing.h"
#include "core/row_shares.h"
#include "core/thread_pool.h"

namespace shardlm {
namespace matmul_impl {

ActFormat act_format(DType weight_type) {
  switch (weight_type) {
    case DType::F32: return ActFormat::F32;
    case DType::F16: return ActFormat::F32_AS_F16;
    case DType::BF16: return ActFormat::F32_AS_BF16;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0: return ActFormat::Q8_32;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return ActFormat::Q8_K;
    default: throw Error(fmt::format("matmul: weight type {} is not supported", dtype_name(weight_type)));
  }
}

size_t act_row_bytes(ActFormat f, int64_t cols) {
  switch (f) {
    case ActFormat::F32:
    case ActFormat::F32_AS_F16:
    case ActFormat::F32_AS_BF16: return size_t(cols) * sizeof(float);
    case ActFormat::Q8_32: return size_t(cols / 32) * (sizeof(block_q8_32) + 3 * sizeof(float));
    case ActFormat::Q8_K: return size_t(cols / QK_K) * sizeof(block_q8_K);
  }
  return 0;
}

namespace {

// Scale and rounding shared by both block sizes; std::nearbyint rounds ties to
// even like the SIMD conversions, so any vectorised twin gives the same bytes.
// The codes use 127/max|x| (not 1/d) because that is what GGUF's reference
// engine does, and matching its codes makes our logits match its logits.
float quantize_block(const float* x, int8_t* q, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = int8_t(std::nearbyint(x[i] * id));
  return d;
}

}  // namespace

void fill_q8_32_columns(block_q8_32* row, int64_t nb) {
  auto* d = reinterpret_cast<float*>(row + nb);
  for (int64_t b = 0; b < nb; ++b) {
    d[b] = row[b].d;
    d[nb + b] = row[b].ds;
    d[2 * nb + b] = row[b].s_f16;
  }
}

void quantize_act_q8_32(const float* x, block_q8_32* out, int64_t cols) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    block_q8_32& blk = out[b];
    const float d = quantize_block(x + b * 32, blk.qs, 32);
    blk.d = round_scale_to_f16(d);
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += blk.qs[i];
    blk.ds = blk.d * float(sum);  // exact: 11-bit scale × 12-bit sum
    blk.minus8_sum = -8 * sum;
    blk.s_f16 = round_scale_to_f16(d * float(sum));
  }
}

void quantize_act_q8_k(const float* x, block_q8_K* out, int64_t cols) {
  for (int64_t b = 0; b < cols / QK_K; ++b) {
    block_q8_K& blk = out[b];
    blk.d = quantize_block(x + b * QK_K, blk.qs, QK_K);
    for (int g = 0; g < QK_K / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += blk.qs[16 * g + i];
      blk.bsums[g] = int16_t(sum);
    }
  }
}

void round_act_f16(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(f32_to_f16(x[i]));
}

void round_act_bf16(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

}  // namespace matmul_impl

using namespace matmul_impl;

namespace {

void run_on(ThreadPool* pool, const std::function<void(int, int)>& fn, std::span<const ThreadPool::Prefetch> then = {}) {
  if (pool) {
    pool->run(fn, then);
  } else {
    fn(0, 1);
  }
}

}  // namespace

// A kernel file is only entered once its ISA is known to run: even its
// selector function may contain instructions of that ISA.
Kernel matmul_impl::own_kernel(Isa isa, DType type, int64_t n_tokens) {
  if (!isa_available(isa)) return nullptr;
  if (n_tokens >= kGemmMinTokens) {
    if (isa == Isa::Amx) return amx_gemm_kernel(type);
    if (isa == Isa::Avx512) {
      if (const Kernel k = avx512_gemm_kernel(type)) return k;
      if (const Kernel k = avx512_float_gemm_kernel(type)) return k;
    }
  }
  switch (isa) {
    case Isa::Scalar: return scalar_kernel(type);
    case Isa::Avx2: {
      const Kernel k = avx2_kernel(type);
      return k ? k : avx2_kquant_kernel(type);
    }
    case Isa::Avx512: {
      const Kernel k = avx512_kernel(type);
      return k ? k : avx512_kquant_kernel(type);
    }
    case Isa::Amx: return amx_kernel(type);
  }
  return nullptr;
}

// A Panels16 matrix has only the panel kernels (and the scalar reference on
// panels). Up to kPanelOnePassTokens the VNNI one_pass reads each panel once
// for all tokens and beats the AMX tile's fixed cost per block (measured
// faster at 4-8 tokens for every type with an AMX kernel, slower at 9 and
// more: docs/bench/amx10.md), so a fixed rule, not a timing at load, picks.
Isa matmul_impl::panel_isa(Isa isa, DType type, int64_t n_tokens) {
  if (isa == Isa::Amx && n_tokens > kPanelOnePassTokens && isa_available(Isa::Amx) && amx_panel_kernel(type))
    return Isa::Amx;
  if (isa >= Isa::Avx512 && isa_available(Isa::Avx512) && avx512_panel_kernel(type)) return Isa::Avx512;
  if (isa >= Isa::Avx2 && isa_available(Isa::Avx2) && avx2_panel_kernel(type)) return Isa::Avx2;
  return Isa::Scalar;
}

Kernel matmul_impl::panel_kernel(Isa isa, DType type, int64_t n_tokens) {
  switch (panel_isa(isa, type, n_tokens)) {
    case Isa::Amx: return amx_panel_kernel(type);
    case Isa::Avx512: return avx512_panel_kernel(type);
    case Isa::Avx2: return avx2_panel_kernel(type);
    default: return scalar_panel_kernel(type);
  }
}

Isa matmul_impl::newest_isa(Isa cap, DType type, int64_t n_tokens) {
  for (Isa isa : {Isa::Amx, Isa::Avx512, Isa::Avx2})
    if (isa <= cap && own_kernel(isa, type, n_tokens)) return isa;
  return Isa::Scalar;
}

namespace {

void check_matrix(const MatrixView& w, int64_t n_tokens, int64_t x_cols) {
  const auto where = [&] { return fmt::format("{} matrix {}x{}", dtype_name(w.type), w.rows, w.cols); };
  const DTypeTraits& tr = traits(w.type);
  if (w.rows < 0 || w.cols <= 0 || n_tokens < 0) throw Error(fmt::format("matmul: bad shape of {}", where()));
  if (w.cols % tr.block_elems != 0)
    throw Error(fmt::format("matmul: {}: cols is not a multiple of the block size {}", where(), tr.block_elems));
  if (w.row_stride < row_bytes(w.type, w.cols)) throw Error(fmt::format("matmul: {}: row stride too small", where()));
  if (x_cols != w.cols)
    throw Error(fmt::format("matmul: {} times activations of {} columns", where(), x_cols));
  if (w.rows > 0 && !w.data) throw Error(fmt::format("matmul: {} has no data", where()));
}

// Threads claim row chunks (about four per thread, kRowAlign-aligned) of
// their own shares, then of the others' (RowShares): on a VM whose cores are
// sometimes taken away, a thread that got less CPU no longer holds the others
// at the barrier. Every row is still computed whole by one thread with the
// same tiling, so the result does not depend on who took it.
int64_t chunk_rows(const MatrixView& w, int threads) {
  const int64_t chunk = (w.rows + 4 * threads - 1) / (4 * threads);
  return (chunk + kRowAlign - 1) / kRowAlign * kRowAlign;
}

// One matrix's share of a job: its kernel and arguments, and how its rows
// are dealt out.
struct MatrixJob {
  Kernel kernel;
  KernelArgs args;
  std::optional<RowShares> shares;  // none: no rows or no tokens
};

// `isa`: for a Panels16 matrix, the cap of its panel kernel (whose
// prefetches are timed under it). The activations are put in w's form here,
// on the calling thread, before any job starts.
MatrixJob prepare_job(Kernel kernel, Isa isa, const MatrixView& w, PreparedInput& x, float* y, ThreadPool* pool) {
  if (!kernel) throw Error(fmt::format("matmul: weight type {} is not supported", dtype_name(w.type)));
  check_matrix(w, x.n_tokens(), x.cols());
  MatrixJob job{kernel, {}, std::nullopt};
  if (w.rows == 0 || x.n_tokens() == 0) return job;
  KernelArgs& args = job.args;
  args.w = &w;
  args.x = x.for_type(w.type, pool, &args.x_stride);
  args.n_tokens = x.n_tokens();
  args.y = y;
  if (w.layout == WeightLayout::Panels16) {
    const PanelStreaming streaming = panel_streaming(isa, w.type, x.n_tokens());
    args.prefetch = streaming.plan;
    args.prefetch_ahead = streaming.ahead;
    args.kquant_codes = streaming.codes;
    args.streams = streaming.streams;
  }
  args.activations = activation_loads(isa, w.type, x.n_tokens());
  const int nth_max = pool ? pool->size() : 1;
  job.shares.emplace(w.rows, chunk_rows(w, nth_max), nth_max);
  return job;
}

}  // namespace

// The start of the share each thread takes first, up to kThenBytes: well
// inside a core's L2 (on the Xeon with AMX 256 KiB and 1 MiB both sped 1B
// Q4_0 decode at 2 threads up ~2 %). Nothing for one thread, which never
// waits.
std::vector<ThreadPool::Prefetch> matmul_prefetches(const MatrixView* w, ThreadPool* pool) {
  constexpr size_t kThenBytes = 256 << 10;
  std::vector<ThreadPool::Prefetch> out;
  if (!w || w->rows == 0 || !w->data || !pool || pool->size() < 2) return out;
  const int nth = pool->size();
  for (int i = 0; i < nth; ++i) {
    const auto [r0, r1] = RowShares::share(w->rows, chunk_rows(*w, nth), nth, i);
    out.push_back({r1 > r0 ? w->row(r0) : nullptr,
                   r1 > r0 ? std::min(kThenBytes, size_t(r1 - r0) * w->row_stride) : 0});
  }
  return out;
}

namespace {

// The matrices in turn: a thread done with one (its share and what it could
// take of the others') goes on to the next without waiting, then prefetches
// its start of `then`. Nothing to do wakes no thread.
void run_jobs(std::vector<MatrixJob>& jobs, ThreadPool* pool, const MatrixView* then) {
  if (std::none_of(jobs.begin(), jobs.end(), [](const MatrixJob& job) { return job.shares.has_value(); })) return;
  run_on(pool, [&](int ith, int) {
    for (MatrixJob& job : jobs)
      if (job.shares)
        for (int64_t r0, r1; job.shares->next(ith, &r0, &r1);) job.kernel(job.args, r0, r1);
  }, matmul_prefetches(then, pool));
}

void run_kernel(Kernel kernel, Isa isa, const MatrixView& w, PreparedInput& x, float* y, ThreadPool* pool,
                const MatrixView* then = nullptr) {
  std::vector<MatrixJob> jobs;
  jobs.push_back(prepare_job(kernel, isa, w, x, y, pool));
  run_jobs(jobs, pool, then);
}

// The kernel matmul() runs on w and the ISA to prepare it with.
std::pair<Kernel, Isa> kernel_for(const MatrixView& w, int64_t n_tokens) {
  if (w.layout == WeightLayout::Panels16) {
    log_matmul_kernel(w, n_tokens, active_isa());
    return {panel_kernel(active_isa(), w.type, n_tokens), active_isa()};
  }
  const Isa isa = dispatch_isa(active_isa(), w.type, n_tokens);
  log_matmul_kernel(w, n_tokens, isa);
  return {own_kernel(isa, w.type, n_tokens), isa};
}

}  // namespace

void time_kernel_choices(const MatrixView& w) {
  for (int64_t n = 1; n <= kTimedTokens; ++n) {
    if (w.layout == WeightLayout::Panels16) {
      panel_streaming(active_isa(), w.type, n);
      activation_loads(active_isa(), w.type, n);
    } else {
      activation_loads(dispatch_isa(active_isa(), w.type, n), w.type, n);
    }
  }
}

PreparedInput::PreparedInput(const float* x, int64_t n_tokens, int64_t cols, TokenSums sums)
    : x_(x), n_tokens_(n_tokens), cols_(cols), sums_(sums) {
  if (n_tokens < 0 || cols <= 0) throw Error(fmt::format("matmul: bad activation shape {}x{}", n_tokens, cols));
}

const void* PreparedInput::for_type(DType type, ThreadPool* pool, size_t* token_stride) {
  const ActFormat f = act_format(type);
  *token_stride = act_row_bytes(f, cols_);
  if (f == ActFormat::F32) return x_;
  if (f == ActFormat::F32_AS_F16 || f == ActFormat::F32_AS_BF16) {
    std::vector<float>& rounded = f == ActFormat::F32_AS_F16 ? as_f16_ : as_bf16_;
    if (rounded.empty() && n_tokens_ > 0) {
      rounded.resize(size_t(n_tokens_ * cols_));
      const bool f16 = f == ActFormat::F32_AS_F16;
      const bool avx2 = active_isa() >= Isa::Avx2;
      const auto round = f16 ? (avx2 ? round_act_f16_avx2 : round_act_f16) : (avx2 ? round_act_bf16_avx2 : round_act_bf16);
      // A token to a thread, as the quantizers below.
      run_on(n_tokens_ > 1 ? pool : nullptr, [&](int ith, int nth) {
        for (int64_t t = ith; t < n_tokens_; t += nth) round(x_ + t * cols_, rounded.data() + t * cols_, cols_);
      });
    }
    return rounded.data();
  }
  std::vector<uint8_t>& buf = f == ActFormat::Q8_32 ? q8_32_ : q8_k_;
  if (buf.empty() && n_tokens_ > 0) {
    const int64_t block = f == ActFormat::Q8_32 ? 32 : QK_K;
    if (cols_ % block != 0)
      throw Error(fmt::format("matmul: activations of {} columns do not fill blocks of {}", cols_, block));
    const size_t stride = *token_stride;
    buf.resize(stride * size_t(n_tokens_));
    // The quantizers are byte-identical; the widest this CPU runs is fastest.
    const Isa isa = active_isa();
    const auto q8_32 = isa >= Isa::Avx512 ? quantize_act_q8_32_avx512
                       : isa >= Isa::Avx2 ? quantize_act_q8_32_avx2
                                          : quantize_act_q8_32;
    const auto q8_k = isa >= Isa::Avx512 ? quantize_act_q8_k_avx512
                      : isa >= Isa::Avx2 ? quantize_act_q8_k_avx2
                                         : quantize_act_q8_k;
    // A token to a thread: one token (decode) is quantized here, not worth
    // waking the pool for (a sync of its threads per matmul).
    run_on(n_tokens_ > 1 ? pool : nullptr, [&](int ith, int nth) {
      for (int64_t t = ith; t < n_tokens_; t += nth) {
        void* dst = buf.data() + stride * size_t(t);
        if (f == ActFormat::Q8_32) {
          auto* blocks = static_cast<block_q8_32*>(dst);
          q8_32(x_ + t * cols_, blocks, cols_);
          fill_q8_32_columns(blocks, cols_ / 32);
        } else {
          q8_k(x_ + t * cols_, static_cast<block_q8_K*>(dst), cols_);
        }
      }
    });
  }
  return buf.data();
}

void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool,
            const MatrixView* then, TokenSums sums) {
  PreparedInput prepared(x, n_tokens, w.cols, sums);
  matmul(w, prepared, y, pool, then);
}

bool same_bits_as_one_token(const MatrixView& w) {
  return w.layout == WeightLayout::Panels16 || size_t(w.rows) * w.row_stride <= kOneTokenMaxBytes;
}

bool one_token_at_a_time(const MatrixView& w, const PreparedInput& x) {
  return x.sums() == TokenSums::AsOneToken && x.n_tokens() > 1 && w.layout != WeightLayout::Panels16 &&
         same_bits_as_one_token(w);
}

void matmul(const MatrixView& w, PreparedInput& x, float* y, ThreadPool* pool, const MatrixView* then) {
  if (one_token_at_a_time(w, x)) {
    for (int64_t t = 0; t < x.n_tokens(); ++t) {
      PreparedInput token(x.data() + t * x.cols(), 1, x.cols());
      matmul(w, token, y + t * w.rows, pool, t + 1 == x.n_tokens() ? then : nullptr);
    }
    return;
  }
  const auto [kernel, isa] = kernel_for(w, x.n_tokens());
  run_kernel(kernel, isa, w, x, y, pool, then);
}

void matmul_many(std::span<const MatmulTarget> targets, PreparedInput& x, ThreadPool* pool, const MatrixView* then) {
  if (std::any_of(targets.begin(), targets.end(), [&](const MatmulTarget& t) { return one_token_at_a_time(*t.w, x); })) {
    for (size_t i = 0; i < targets.size(); ++i)
      matmul(*targets[i].w, x, targets[i].y, pool, i + 1 == targets.size() ? then : nullptr);
    return;
  }
  std::vector<MatrixJob> jobs;
  for (const MatmulTarget& t : targets) {
    const auto [kernel, isa] = kernel_for(*t.w, x.n_tokens());
    jobs.push_back(prepare_job(kernel, isa, *t.w, x, t.y, pool));
  }
  run_jobs(jobs, pool, then);
}

void matmul_with_isa(Isa isa, const MatrixView& w, PreparedInput& x, float* y, ThreadPool* pool) {
  if (!isa_available(isa)) throw Error(fmt::format("matmul: this CPU/OS cannot run {} kernels", isa_name(isa)));
  const int64_t n = x.n_tokens();
  if (w.layout == WeightLayout::Panels16) return run_kernel(panel_kernel(isa, w.type, n), isa, w, x, y, pool);
  run_kernel(own_kernel(newest_isa(isa, w.type, n), w.type, n), isa, w, x, y, pool);
}

bool isa_has_kernel(Isa isa, DType type) {
  return isa_has_kernel(isa, type, 1) || isa_has_kernel(isa, type, kGemmMinTokens);
}

bool isa_has_kernel(Isa isa, DType type, int64_t n_tokens) { return own_kernel(isa, type, n_tokens) != nullptr; }

Isa matmul_kernel_isa(DType type, int64_t n_tokens) { return dispatch_isa(active_isa(), type, n_tokens); }

Isa panel_kernel_isa(Isa cap, DType type, int64_t n_tokens) { return panel_isa(cap, type, n_tokens); }

std::string panel_prefetch_summary(Isa cap, DType type, int64_t n_tokens) {
  const PanelStreaming s = panel_streaming(cap, type, n_tokens);
  return fmt::format("{}, {} KiB ahead{}", prefetch_plan_name(s.plan), s.ahead / 1024,
                     s.streams > 1 ? ", 2 streams" : "");
}

}  // namespace shardlm
