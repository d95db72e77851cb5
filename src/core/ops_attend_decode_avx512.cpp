// Decode attention (one token: n_q query heads over one cached K/V head) on
// AVX-512, where AVX2's version spends most of its time in horizontal sums
// and in re-reading V rows once per 8-dimension slice:
//   scores: 4 positions × up to 4 heads at a time, 16-dimension products
//   accumulated per (position, head), the 16 sums then reduced together in
//   one transposing tree (15 shuffle-add steps for 16 dot products);
//   softmax: per head (avx2::softmax: the same e^x, weights normalized before
//   they weigh the values, as the reference does);
//   output: up to 16 accumulators (4 heads × 64 dimensions, or 2 × 128, so
//   a 128-wide V row is read whole once per pair of heads) while the
//   positions stream past, in chunks whose V rows stay in L1 for the other
//   slices and head groups (the sums go on in position order across chunks,
//   so chunking changes no bit).
// A long cache comes from DRAM (a step streams all the weights between two
// reads of a layer's rows), and one K stream prefetched 8 KiB ahead with V
// not prefetched read it at ~60 % of the read probe on a Xeon with AMX. The
// scores walk the positions as two streams, the steps of the first and
// second half in turn (each score is the same sum whatever the order), each
// prefetched 2 KiB ahead, and the first value slice prefetches whole V rows
// 2 KiB ahead: f32 rows 20-30 % faster, f16 5-15 % (docs/BENCHMARKS.md,
// twenty-ninth session).
// In the blocked kernels' sum order (SumOrder::AsBlocks, batch invariance)
// the scores are made a lane a position instead, over 32 K rows transposed
// in registers, and the softmax sums in position order (scores_as_blocks).
// Compiled with AVX-512 flags; internal linkage (see matmul_avx512.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/ops_attend_streams.h"
#include "core/ops_impl.h"
#include "core/reduce16_avx512.h"

namespace shardlm::ops::avx512 {
namespace {

constexpr int kVec = 16;          // floats in a vector
constexpr int kHeads = 4;         // query heads per pass over the rows
constexpr int kPositions = 4;     // positions per score step
constexpr int kTile = 2 * kVec;   // positions a tile of block-order scores takes: two chains a head
constexpr int kMaxTileHeads = 8;  // query heads per pass over a tile (16 accumulators)
constexpr int kMaxValueVecs = 8;  // dimensions per value pass (× heads ≤ 16 accumulators)
constexpr int64_t kValueChunkBytes = 16 << 10;    // V rows re-read from L1 by the other passes

template <bool F16>
inline __m512 load16(const void* base, int64_t i) {
  if constexpr (F16)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
  else
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
}

// scores[g·n_pos + i] = scale · q_g·k_(p0+i) for NH heads (≤ 4) and the
// positions i < `valid` of the 4 at `rows` (element offsets; rows past
// `valid` repeat a valid one and are not stored).
template <bool F16, int NH>
inline __attribute__((always_inline)) void scores_step(const float* q, const KvHead& kv, const int64_t (&rows)[kPositions],
                                                       int64_t valid, float scale, float* scores, int64_t n_pos) {
  __m512 acc[kHeads * kPositions];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t d = 0; d < kv.dim_k; d += kVec) {
    __m512 k[kPositions];
    for (int i = 0; i < kPositions; ++i) k[i] = load16<F16>(kv.k, rows[i] + d);
    for (int g = 0; g < NH; ++g) {
      const __m512 qg = _mm512_loadu_ps(q + g * kv.dim_k + d);
      for (int i = 0; i < kPositions; ++i) acc[g * kPositions + i] = _mm512_fmadd_ps(qg, k[i], acc[g * kPositions + i]);
    }
  }
  const __m512 s = _mm512_mul_ps(simd512::reduce16(acc, simd512::add_ps), _mm512_set1_ps(scale));
  const __mmask8 keep = __mmask8((1u << valid) - 1);
  _mm_mask_storeu_ps(scores, keep, _mm512_castps512_ps128(s));
  if (NH > 1) _mm_mask_storeu_ps(scores + n_pos, keep, _mm512_extractf32x4_ps(s, 1));
  if (NH > 2) _mm_mask_storeu_ps(scores + 2 * n_pos, keep, _mm512_extractf32x4_ps(s, 2));
  if (NH > 3) _mm_mask_storeu_ps(scores + 3 * n_pos, keep, _mm512_extractf32x4_ps(s, 3));
}

// Every head's scores, 4 positions at a time; each step's K rows serve all
// head groups from L1. The steps of the two halves alternate (two streams).
template <bool F16>
void scores_all(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores) {
  constexpr int64_t elem = F16 ? 2 : 4;
  const auto* k_bytes = static_cast<const char*>(kv.k);
  const auto step = [&](int64_t p0) {
    const int64_t valid = std::min<int64_t>(kPositions, n_pos - p0);
    int64_t rows[kPositions];
    for (int i = 0; i < kPositions; ++i) rows[i] = std::min<int64_t>(p0 + i, n_pos - 1) * kv.k_stride;
    // (A prefetch past the cache's end is harmless: it never faults.)
    for (int i = 0; i < kPositions; ++i)
      for (int64_t b = 0; b < kv.dim_k * elem; b += 64) _mm_prefetch(k_bytes + rows[i] * elem + kAttendAheadBytes + b, _MM_HINT_T0);
    for (int64_t g = 0; g < n_q; g += kHeads) {
      const float* qg = q + g * kv.dim_k;
      float* sg = scores + g * n_pos + p0;
      switch (std::min<int64_t>(kHeads, n_q - g)) {
        case 1: scores_step<F16, 1>(qg, kv, rows, valid, scale, sg, n_pos); break;
        case 2: scores_step<F16, 2>(qg, kv, rows, valid, scale, sg, n_pos); break;
        case 3: scores_step<F16, 3>(qg, kv, rows, valid, scale, sg, n_pos); break;
        default: scores_step<F16, 4>(qg, kv, rows, valid, scale, sg, n_pos); break;
      }
    }
  };
  in_two_streams((n_pos + kPositions - 1) / kPositions, [&](int64_t i) { step(i * kPositions); });
}

// Rows r[0..16) become columns: r[j] = lane j of every row, in row order
// (interleaves of 32 and 64 bits, then two stages of 128-bit lane shuffles).
inline __attribute__((always_inline)) void transpose16(__m512 (&r)[kVec]) {
  __m512 t[kVec];
  for (int k = 0; k < kVec; k += 2) {
    t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
  }
  // u[4m + c]: in 128-bit lane L, element 4L + c of rows 4m..4m+3.
  __m512 u[kVec];
  for (int m = 0; m < kVec; m += 4) {
    const __m512d a = _mm512_castps_pd(t[m]), b = _mm512_castps_pd(t[m + 1]), c = _mm512_castps_pd(t[m + 2]),
                  d = _mm512_castps_pd(t[m + 3]);
    u[m] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[m + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[m + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[m + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
    r[4 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
  }
}

// kt[d·32 + i] = k_(rows[i])[d]: a tile's cached K rows (element offsets)
// as dim_k pairs of vectors of positions.
template <bool F16>
void transposed_keys(const KvHead& kv, const int64_t (&rows)[kTile], float* kt) {
  for (int64_t d0 = 0; d0 < kv.dim_k; d0 += kVec)
    for (int half = 0; half < 2; ++half) {
      __m512 r[kVec];
      for (int i = 0; i < kVec; ++i) r[i] = load16<F16>(kv.k, rows[kVec * half + i] + d0);
      transpose16(r);
      for (int j = 0; j < kVec; ++j) _mm512_store_ps(kt + (d0 + j) * kTile + kVec * half, r[j]);
    }
}

// scores[g·n_pos + i] = scale · q_g·k_i for NH heads (≤ 8) over the
// positions of kt in `valid` (two masks of 16), a lane a position: each dot
// product's multiply-adds in dimension order from zero, as a lane of the
// blocked kernels makes it (ops_avx512.cpp, ops_attend_block_avx2.cpp), so a
// token scores the same bits attended alone or in a block.
template <int NH>
inline __attribute__((always_inline)) void scores_tile(const float* q, int64_t dim_k, const float* kt,
                                                       const __mmask16 (&valid)[2], float scale, float* scores,
                                                       int64_t n_pos) {
  __m512 acc[NH][2];
  for (auto& a : acc) a[0] = a[1] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dim_k; ++d) {
    const __m512 k0 = _mm512_load_ps(kt + d * kTile), k1 = _mm512_load_ps(kt + d * kTile + kVec);
    for (int g = 0; g < NH; ++g) {
      const __m512 qd = _mm512_set1_ps(q[g * dim_k + d]);
      acc[g][0] = _mm512_fmadd_ps(qd, k0, acc[g][0]);
      acc[g][1] = _mm512_fmadd_ps(qd, k1, acc[g][1]);
    }
  }
  for (int g = 0; g < NH; ++g)
    for (int h = 0; h < 2; ++h)
      _mm512_mask_storeu_ps(scores + g * n_pos + kVec * h, valid[h], _mm512_mul_ps(acc[g][h], _mm512_set1_ps(scale)));
}

// scores_all in the blocked kernels' order, 32 positions at a time; a
// tile's K rows, read and transposed once, serve all heads from L1. The
// tiles of the two halves alternate (two streams).
template <bool F16>
void scores_as_blocks(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores) {
  constexpr int64_t elem = F16 ? 2 : 4;
  const auto* k_bytes = static_cast<const char*>(kv.k);
  thread_local std::vector<float> scratch;
  if (scratch.size() < size_t(kv.dim_k * kTile + kVec)) scratch.resize(size_t(kv.dim_k * kTile + kVec));
  float* kt = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t(63));
  const auto tile = [&](int64_t p0) {
    const int64_t valid = std::min<int64_t>(kTile, n_pos - p0);
    int64_t rows[kTile];  // positions past the cache's end repeat its last (their scores are not stored)
    for (int i = 0; i < kTile; ++i) rows[i] = std::min<int64_t>(p0 + i, n_pos - 1) * kv.k_stride;
    // The tile two ahead of this one (the other stream's comes between): on
    // Zen 5, 4096 rows of 64 f32 read at 12-14 GB/s so, at 9-10 with the next
    // tile or rows 2 KiB ahead (docs/BENCHMARKS.md, "Batch invariance"). A
    // prefetch past the cache's end is harmless: it never faults.
    const char* ahead = k_bytes + (p0 + 2 * kTile) * kv.k_stride * elem;
    for (int64_t b = 0; b < kTile * kv.k_stride * elem; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
    transposed_keys<F16>(kv, rows, kt);
    const __mmask16 keep[2] = {__mmask16((1u << std::min<int64_t>(valid, kVec)) - 1),
                               __mmask16((1u << std::max<int64_t>(valid - kVec, 0)) - 1)};
    for (int64_t g = 0; g < n_q; g += kMaxTileHeads) {
      const float* qg = q + g * kv.dim_k;
      float* sg = scores + g * n_pos + p0;
      switch (std::min<int64_t>(kMaxTileHeads, n_q - g)) {
        case 1: scores_tile<1>(qg, kv.dim_k, kt, keep, scale, sg, n_pos); break;
        case 2: scores_tile<2>(qg, kv.dim_k, kt, keep, scale, sg, n_pos); break;
        case 3: scores_tile<3>(qg, kv.dim_k, kt, keep, scale, sg, n_pos); break;
        case 4: scores_tile<4>(qg, kv.dim_k, kt, keep, scale, sg, n_pos); break;
        case 5: scores_tile<5>(qg, kv.dim_k, kt, keep, scale, sg, n_pos); break;
        case 6: scores_tile<6>(qg, kv.dim_k, kt, keep, scale, sg, n_pos); break;
        case 7: scores_tile<7>(qg, kv.dim_k, kt, keep, scale, sg, n_pos); break;
        default: scores_tile<8>(qg, kv.dim_k, kt, keep, scale, sg, n_pos); break;
      }
    }
  };
  in_two_streams((n_pos + kTile - 1) / kTile, [&](int64_t i) { tile(i * kTile); });
}

// out_g[d0, d0 + 16·C) += Σ_p w_g[p] · v_p[d0, d0 + 16·C) over [p0, p1) for
// the G heads (w_g at w + g·n_pos, out_g at out + g·dim_v).
template <bool F16, int G, int C>
void weigh(const float* w, int64_t n_pos, const KvHead& kv, int64_t d0, int64_t p0, int64_t p1, float* out) {
  __m512 acc[G][C];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_loadu_ps(out + g * kv.dim_v + d0 + c * kVec);
  for (int64_t p = p0; p < p1; ++p) {
    // The first slice prefetches whole rows: the others read the chunk from L1.
    if (d0 == 0) prefetch_value_row(kv, p, F16 ? 2 : 4, kAttendAheadBytes);
    __m512 v[C];
    for (int c = 0; c < C; ++c) v[c] = load16<F16>(kv.v, p * kv.v_stride + d0 + c * kVec);
    for (int g = 0; g < G; ++g) {
      const __m512 wg = _mm512_set1_ps(w[g * n_pos + p]);
      for (int c = 0; c < C; ++c) acc[g][c] = _mm512_fmadd_ps(wg, v[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + g * kv.dim_v + d0 + c * kVec, acc[g][c]);
}

using WeighFn = void (*)(const float*, int64_t, const KvHead&, int64_t, int64_t, int64_t, float*);

// weigh for G heads and C vectors (G·C ≤ 16 accumulators).
template <bool F16, int G>
WeighFn weigh_fn(int64_t c) {
  if constexpr (G <= 2) {
    switch (c) {
      case 5: return weigh<F16, G, 5>;
      case 6: return weigh<F16, G, 6>;
      case 7: return weigh<F16, G, 7>;
      case 8: return weigh<F16, G, 8>;
      default: break;
    }
  }
  switch (c) {
    case 1: return weigh<F16, G, 1>;
    case 2: return weigh<F16, G, 2>;
    case 3: return weigh<F16, G, 3>;
    default: return weigh<F16, G, 4>;
  }
}

// The weighted values of every head over the positions [p0, p1): slices of
// up to 8 vectors of each V row (a 128-wide row in one slice, read whole
// once per pair of heads), the heads 4 at a time for slices of up to 4
// vectors, else 2.
template <bool F16>
void weigh_chunk(const float* w, int64_t n_q, int64_t n_pos, const KvHead& kv, int64_t p0, int64_t p1, float* out) {
  for (int64_t d0 = 0; d0 < kv.dim_v;) {
    const int64_t c = std::min<int64_t>(kMaxValueVecs, (kv.dim_v - d0) / kVec);
    const int64_t heads = c > 4 ? 2 : 4;
    for (int64_t g = 0; g < n_q; g += heads) {
      WeighFn fn = nullptr;
      switch (std::min(heads, n_q - g)) {
        case 1: fn = weigh_fn<F16, 1>(c); break;
        case 2: fn = weigh_fn<F16, 2>(c); break;
        case 3: fn = weigh_fn<F16, 3>(c); break;
        default: fn = weigh_fn<F16, 4>(c); break;
      }
      fn(w + g * n_pos, n_pos, kv, d0, p0, p1, out + g * kv.dim_v);
    }
    d0 += c * kVec;
  }
}

template <bool F16>
void attend_heads(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores, float* out,
                  SumOrder order) {
  prefetch_head_start(kv, n_pos, F16 ? 2 : 4);
  if (order == SumOrder::AsBlocks) {
    scores_as_blocks<F16>(q, n_q, kv, n_pos, scale, scores);
    avx2::softmax_in_order(scores, n_q, n_pos);
  } else {
    scores_all<F16>(q, n_q, kv, n_pos, scale, scores);
    for (int64_t g = 0; g < n_q; ++g) avx2::softmax(scores + g * n_pos, n_pos);
  }
  std::fill(out, out + n_q * kv.dim_v, 0.0f);
  const int64_t chunk = std::max<int64_t>(16, kValueChunkBytes / (kv.dim_v * (F16 ? 2 : 4)));
  for (int64_t p0 = 0; p0 < n_pos; p0 += chunk) {
    const int64_t p1 = std::min(n_pos, p0 + chunk);
    weigh_chunk<F16>(scores, n_q, n_pos, kv, p0, p1, out);
  }
}

}  // namespace

bool attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores, float* out,
            SumOrder order) {
  static_assert(kVec == 16, "takes_attend's multiples");
  if (!takes_attend(kv)) return false;
  kv.f16 ? attend_heads<true>(q, n_q, kv, n_pos, scale, scores, out, order)
         : attend_heads<false>(q, n_q, kv, n_pos, scale, scores, out, order);
  return true;
}

}  // namespace shardlm::ops::avx512

#pragma GCC diagnostic pop
