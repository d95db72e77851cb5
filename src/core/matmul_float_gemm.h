// Float weights (F32, F16, BF16) at 4 and more tokens: prefill and batched
// decode. Every output is a dot product of a weight row and a token's
// activations, both contiguous along the columns, so a tile of R rows × T
// tokens keeps R·T vector sums in registers: each weight vector loaded feeds
// T multiply-adds, each activation vector R (AVX-512: 4 × 6 in 32 registers;
// AVX2: 2 × 6 in 16).
//
// Blocking: a thread's rows go kRowBlock at a time and the columns kChunk at
// a time; for one block and chunk, the token tiles take turns. A tile's
// activations (6 × 1024 floats, 24 KiB) stay in L1 while the block's rows
// pass under them; the block's chunk of weights (256 KiB) stays in L2 for
// every token tile, so the weights come from DRAM once.
//
// An output's arithmetic depends only on its row and token: one vector chain
// per row and token through a chunk (a chunk's last partial vector read
// zero-padded), reduced in the ISA's fixed order, the chunks added in column
// order. So results do not depend on the tile a row or token fell in, the
// batch, or the thread count (tests/core/test_matmul_gemm.cpp).
//
// Include only from an ISA's kernel file, which supplies
//   V: Vec, kLanes, kRows, kTokens, zero(), load(const float*), fmadd(a, b, c),
//      reduce(const Vec (&)[kRows], float*)
//   C: kStep columns a vector, kWeightBytes, XElem, w(p), x(p), madd(acc, w, x),
//      and x_chunk(x row, k0, n, buffer of kChunk) putting the chunk's
//      activations in the buffer as the tile reads them: WidenedColumns below,
//      or the ISA's own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

namespace float_gemm_impl {

constexpr int64_t kChunk = 1024;   // a multiple of every kStep
// Rows whose chunk of weights (256 KiB) stays in L2 for every token tile: 64
// of F32, 128 of F16/BF16. Each block copies every token's chunk of
// activations once, so larger blocks copy less.
template <class C>
constexpr int64_t kRowBlock = (256 << 10) / (kChunk * int64_t(C::kWeightBytes));

// R rows × T tokens over one chunk of n columns, from w[i] + k0 (bytes of
// column k0 on) and x[t]: out[t][i] = row i · token t over the chunk. With
// `ahead`, the R rows of weights the next tile reads (from their chunk's
// start) are prefetched a line per line read here: the first token tile of a
// block reads its weights from DRAM in pieces of a chunk, too short for the
// core's prefetchers to follow (1B F16, 4 sequences at 1 thread: 20.9 tok/s
// together without, 29.3 with; one alone 11.0-11.2; Zen 5).
template <class V, class C, int T>
void tile(const uint8_t* const* w, int64_t k0, const typename C::XElem* const* x, int64_t n,
          const uint8_t* const* ahead, float out[][V::kRows]) {
  constexpr int R = V::kRows;
  typename V::Vec acc[T][R];
  for (auto& token : acc)
    for (auto& v : token) v = V::zero();
  const auto step = [&](const uint8_t* const* wk, const typename C::XElem* const* xk) {
    typename V::Vec wv[R];
    for (int i = 0; i < R; ++i) wv[i] = C::w(wk[i]);
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      const typename V::Vec xv = C::x(xk[t]);
      for (int i = 0; i < R; ++i) acc[t][i] = C::madd(acc[t][i], wv[i], xv);
    }
  };
  int64_t k = 0;
  for (; k + C::kStep <= n; k += C::kStep) {
    if (ahead && (k * C::kWeightBytes) % 64 == 0)
      for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(ahead[i] + k * C::kWeightBytes), _MM_HINT_T0);
    const uint8_t* wk[R];
    const typename C::XElem* xk[T];
    for (int i = 0; i < R; ++i) wk[i] = w[i] + (k0 + k) * C::kWeightBytes;
    for (int t = 0; t < T; ++t) xk[t] = x[t] + k;
    step(wk, xk);
  }
  if (k < n) {  // the last partial vector, from zero-padded copies
    alignas(64) uint8_t wpad[R][C::kStep * C::kWeightBytes] = {};
    alignas(64) typename C::XElem xpad[T][C::kStep] = {};
    const uint8_t* wk[R];
    const typename C::XElem* xk[T];
    for (int i = 0; i < R; ++i) {
      std::memcpy(wpad[i], w[i] + (k0 + k) * C::kWeightBytes, size_t(n - k) * C::kWeightBytes);
      wk[i] = wpad[i];
    }
    for (int t = 0; t < T; ++t) {
      std::memcpy(xpad[t], x[t] + k, size_t(n - k) * sizeof(typename C::XElem));
      xk[t] = xpad[t];
    }
    step(wk, xk);
  }
  for (int t = 0; t < T; ++t) V::reduce(acc[t], out[t]);
}

template <class V, class C>
void tile_of(int tokens, const uint8_t* const* w, int64_t k0, const typename C::XElem* const* x, int64_t n,
             const uint8_t* const* ahead, float out[][V::kRows]) {
  static_assert(V::kTokens >= 1 && V::kTokens <= 6);
  switch (tokens) {
    case 1: return tile<V, C, 1>(w, k0, x, n, ahead, out);
    case 2: return tile<V, C, std::min(2, V::kTokens)>(w, k0, x, n, ahead, out);
    case 3: return tile<V, C, std::min(3, V::kTokens)>(w, k0, x, n, ahead, out);
    case 4: return tile<V, C, std::min(4, V::kTokens)>(w, k0, x, n, ahead, out);
    case 5: return tile<V, C, std::min(5, V::kTokens)>(w, k0, x, n, ahead, out);
    default: return tile<V, C, V::kTokens>(w, k0, x, n, ahead, out);
  }
}

// The size of the token tile starting at `done` of n: tiles of at most
// `most`, as even as they go (8 tokens: 4 + 4, not 6 + 2, whose 2-token tile
// would load a weight vector per two multiply-adds).
inline int tile_tokens(int64_t n, int64_t done, int most) {
  const int64_t tiles_left = (n - done + most - 1) / most;
  return int((n - done + tiles_left - 1) / tiles_left);
}

// A line more than a chunk per token: rows of activations kChunk apart (a
// multiple of 4 KiB) would share L1's sets with each other and with the
// weights' rows; copied one line apart they spread over the sets.
template <class C>
constexpr int64_t kBufferRow = kChunk + 64 / sizeof(typename C::XElem);

// R rows from `first` (clamped to end) at column k.
template <class V, class C>
void group_at(const MatrixView& m, int64_t first, int64_t end, int64_t k, const uint8_t** rows) {
  for (int i = 0; i < V::kRows; ++i) rows[i] = m.row(std::min(first + i, end - 1)) + k * C::kWeightBytes;
}

// One tile of `tokens` tokens from t0 over chunk k0 of the rows from r (the
// last group of fewer rows repeats its last row and keeps only its own),
// stored in y (the first chunk) or added to it, prefetching `ahead` (R rows
// at their chunk's start, or nullptr).
template <class V, class C>
void run_tile(const KernelArgs& a, int64_t r, int64_t rend, int64_t t0, int tokens, int64_t k0,
              const typename C::XElem* const* x, const uint8_t* const* ahead) {
  const MatrixView& m = *a.w;
  const uint8_t* w[V::kRows];
  group_at<V, C>(m, r, rend, 0, w);
  float sums[V::kTokens][V::kRows];
  tile_of<V, C>(tokens, w, k0, x, std::min(kChunk, m.cols - k0), ahead, sums);
  const int rows = int(std::min<int64_t>(V::kRows, rend - r));
  for (int t = 0; t < tokens; ++t) {
    float* y = a.y + (t0 + t) * m.rows + r;
    for (int i = 0; i < rows; ++i) y[i] = k0 == 0 ? sums[t][i] : y[i] + sums[t][i];
  }
}

}  // namespace float_gemm_impl

// Columns as f32 vectors: weights widened by W (kBytes, load(p)), activations
// as given.
template <class V, class W>
struct WidenedColumns {
  using Vec = typename V::Vec;
  using XElem = float;
  static constexpr int64_t kStep = V::kLanes;
  static constexpr size_t kWeightBytes = W::kBytes;
  static Vec w(const uint8_t* p) { return W::load(p); }
  static Vec x(const float* p) { return V::load(p); }
  static Vec madd(Vec acc, Vec w, Vec x) { return V::fmadd(w, x, acc); }
  static void x_chunk(const float* x, int64_t k0, int64_t n, float* buffer) { std::memcpy(buffer, x + k0, size_t(n) * 4); }
};

template <class V, class C>
void float_gemm(const KernelArgs& a, int64_t r0, int64_t r1) {
  using namespace float_gemm_impl;
  const MatrixView& m = *a.w;
  alignas(64) typename C::XElem buffers[V::kTokens][kBufferRow<C>];
  for (int64_t rb = r0; rb < r1; rb += kRowBlock<C>) {
    const int64_t rend = std::min(rb + kRowBlock<C>, r1);
    for (int64_t k0 = 0; k0 < m.cols; k0 += kChunk) {
      for (int64_t t0 = 0; t0 < a.n_tokens;) {
        const int tokens = tile_tokens(a.n_tokens, t0, V::kTokens);
        const typename C::XElem* x[V::kTokens];
        for (int t = 0; t < tokens; ++t) {
          const auto* row = reinterpret_cast<const float*>(static_cast<const uint8_t*>(a.x) + a.x_stride * size_t(t0 + t));
          C::x_chunk(row, k0, std::min(kChunk, m.cols - k0), buffers[t]);
          x[t] = buffers[t];
        }
        for (int64_t r = rb; r < rend; r += V::kRows) {
          // What the first token tile reads next: this chunk of the block's
          // next rows, the block's next chunk, or the next block's start.
          const uint8_t* next[V::kRows];
          const uint8_t* const* ahead = t0 > 0 ? nullptr : next;
          if (r + V::kRows < rend) {
            group_at<V, C>(m, r + V::kRows, rend, k0, next);
          } else if (k0 + kChunk < m.cols) {
            group_at<V, C>(m, rb, rend, k0 + kChunk, next);
          } else if (rend < r1) {
            group_at<V, C>(m, rend, std::min(rend + kRowBlock<C>, r1), 0, next);
          } else {
            ahead = nullptr;
          }
          run_tile<V, C>(a, r, rend, t0, tokens, k0, x, ahead);
        }
        t0 += tokens;
      }
    }
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl
