// AVX2 + FMA paths of core/ops.h. Tails shorter than 8 use masked loads and
// stores, so every length takes the same arithmetic as the body.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/ops_attend_streams.h"
#include "core/ops_exp_avx2.h"
#include "core/ops_impl.h"
#include "core/ops_kv_avx2.h"

namespace shardlm::ops::avx2 {
namespace {

// Lane mask for the first `count` (0..8) lanes.
__m256i tail_mask(int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)), lanes);
}

float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// x · sigmoid(x) = x / (1 + e^-x); e^-x = inf gives -0, as the reference.
__m256 silu_ps(__m256 x) {
  const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e));
}

// Applies f(a, b) over n lanes: out = f(a, b).
template <typename F>
void binary(const float* a, const float* b, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, m, f(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m)));
  }
}

}  // namespace

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  if (n <= 0) return;
  // Four accumulators hide FMA latency; each lane sums at most n/32 squares.
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      acc[k] = _mm256_fmadd_ps(v, v, acc[k]);
    }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc[0] = _mm256_fmadd_ps(v, v, acc[0]);
  }
  if (i < n) {
    const __m256 v = _mm256_maskload_ps(x + i, tail_mask(n - i));
    acc[1] = _mm256_fmadd_ps(v, v, acc[1]);
  }
  const double sum_sq = double(horizontal_sum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))));
  const __m256 inv_rms = _mm256_set1_ps(1.f / std::sqrt(float(sum_sq / double(n)) + eps));
  if (weight)
    binary(x, weight, out, n, [&](__m256 v, __m256 w) { return _mm256_mul_ps(_mm256_mul_ps(v, inv_rms), w); });
  else
    binary(x, x, out, n, [&](__m256 v, __m256) { return _mm256_mul_ps(v, inv_rms); });
}

namespace {

// The largest of x[0, n), n > 0 (exact in any order).
float max_of(const float* x, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float max = horizontal_max(vmax);
  for (; i < n; ++i) max = std::fmax(max, x[i]);
  return max;
}

}  // namespace

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const __m256 vm = _mm256_set1_ps(max_of(x, n));
  __m256 vsum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    // Masked-off lanes load 0 and would add e^(0-max); zero them instead.
    const __m256 e = _mm256_and_ps(exp_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vm)), _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + i, m, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  const __m256 inv = _mm256_set1_ps(1.f / horizontal_sum(vsum));
  binary(x, x, x, n, [&](__m256 v, __m256) { return _mm256_mul_ps(v, inv); });
}

void softmax_in_order(float* x, int64_t rows, int64_t n) {
  if (n <= 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * n;
    const __m256 vm = _mm256_set1_ps(max_of(row, n));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(row + i, exp_ps(_mm256_sub_ps(_mm256_loadu_ps(row + i), vm)));
    if (i < n) {
      const __m256i m = tail_mask(n - i);
      _mm256_maskstore_ps(row + i, m, exp_ps(_mm256_sub_ps(_mm256_maskload_ps(row + i, m), vm)));
    }
  }
  // The sums in position order, four rows' chains at a time so their
  // latencies overlap.
  for (int64_t r0 = 0; r0 < rows; r0 += 4) {
    const int64_t k = std::min<int64_t>(4, rows - r0);
    float sum[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < k; ++r) sum[r] += x[(r0 + r) * n + i];
    for (int64_t r = 0; r < k; ++r) {
      const __m256 inv = _mm256_set1_ps(1.0f / std::max(sum[r], 1e-30f));
      float* row = x + (r0 + r) * n;
      binary(row, row, row, n, [&](__m256 v, __m256) { return _mm256_mul_ps(v, inv); });
    }
  }
}

void silu(const float* x, float* out, int64_t n) {
  binary(x, x, out, n, [](__m256 v, __m256) { return silu_ps(v); });
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  binary(gate, up, out, n, [](__m256 g, __m256 u) { return _mm256_mul_ps(silu_ps(g), u); });
}

void add(const float* a, const float* b, float* out, int64_t n) { binary(a, b, out, n, [](__m256 x, __m256 y) { return _mm256_add_ps(x, y); }); }
void mul(const float* a, const float* b, float* out, int64_t n) { binary(a, b, out, n, [](__m256 x, __m256 y) { return _mm256_mul_ps(x, y); }); }

float dot(const float* a, const float* b, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    acc[1] = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc[1]);
  }
  return horizontal_sum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

namespace {

// The n < 8 cache elements from element i as floats, zeros above (load8
// for whole vectors: core/ops_kv_avx2.h).
template <bool F16>
__m256 load_part(const void* base, int64_t i, int64_t n) {
  if constexpr (F16) {
    alignas(16) uint16_t h[8] = {};
    std::memcpy(h, static_cast<const uint16_t*>(base) + i, size_t(n) * sizeof(uint16_t));
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
  } else {
    return _mm256_maskload_ps(static_cast<const float*>(base) + i, tail_mask(n));
  }
}

// One cached K/V head's scores for positions p .. p + 3 of head q (dim_k
// elements): lane i is position p + i's dot product times scale. Each lane
// sums in the order of score_at (two accumulators, then the same halving
// steps), so a position's score does not depend on its neighbours.
template <bool F16>
inline __attribute__((always_inline)) __m128 scores4(const float* q, const KvHead& kv, int64_t p, float scale) {
  __m256 acc[4][2];
  for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= kv.dim_k; i += 16)
    for (int j = 0; j < 2; ++j) {
      const __m256 qv = _mm256_loadu_ps(q + i + 8 * j);
      for (int r = 0; r < 4; ++r)
        acc[r][j] = _mm256_fmadd_ps(qv, load8<F16>(kv.k, (p + r) * kv.k_stride + i + 8 * j), acc[r][j]);
    }
  for (; i < kv.dim_k; i += 8) {
    const int64_t n = std::min<int64_t>(8, kv.dim_k - i);
    const __m256 qv = _mm256_maskload_ps(q + i, tail_mask(n));
    for (int r = 0; r < 4; ++r) acc[r][0] = _mm256_fmadd_ps(qv, load_part<F16>(kv.k, (p + r) * kv.k_stride + i, n), acc[r][0]);
  }
  __m256 v[4];
  for (int r = 0; r < 4; ++r) v[r] = _mm256_add_ps(acc[r][0], acc[r][1]);
  // horizontal_sum's steps on four vectors at once: halves added (s_k =
  // v_k + v_k+4), then s_0 + s_2 and s_1 + s_3, then those two.
  const __m256 s01 = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[1], 0x20), _mm256_permute2f128_ps(v[0], v[1], 0x31));
  const __m256 s23 = _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[3], 0x20), _mm256_permute2f128_ps(v[2], v[3], 0x31));
  const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t, t, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(t, t, _MM_SHUFFLE(3, 1, 3, 1)));
  // r: positions 0, 2 in the low half, 1, 3 in the high half.
  const __m128 sums = _mm_unpacklo_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
  return _mm_mul_ps(sums, _mm_set1_ps(scale));
}

template <bool F16>
float score_at(const float* q, const KvHead& kv, int64_t p, float scale) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 16 <= kv.dim_k; i += 16)
    for (int j = 0; j < 2; ++j)
      acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8 * j), load8<F16>(kv.k, p * kv.k_stride + i + 8 * j), acc[j]);
  for (; i < kv.dim_k; i += 8) {
    const int64_t n = std::min<int64_t>(8, kv.dim_k - i);
    acc[0] = _mm256_fmadd_ps(_mm256_maskload_ps(q + i, tail_mask(n)), load_part<F16>(kv.k, p * kv.k_stride + i, n), acc[0]);
  }
  return horizontal_sum(_mm256_add_ps(acc[0], acc[1])) * scale;
}

// Rows r[0..8) become columns: r[j] = lane j of every row, in row order.
inline __attribute__((always_inline)) void transpose8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  // u[4h + c]: in 128-bit lane L, element 4L + c of rows 4h..4h+3.
  for (int h = 0; h < 8; h += 4) {
    u[h] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// Positions a tile of decode scores takes: two vectors, so each head has two
// dependency chains of multiply-adds (four heads: eight, FMA latency hidden).
constexpr int kTile = 16;

// kt[d·16 + i] = k_(rows[i])[d]: a tile's cached K rows (element offsets)
// as dim_k pairs of vectors of positions.
template <bool F16>
void transposed_keys(const KvHead& kv, const int64_t (&rows)[kTile], float* kt) {
  for (int64_t d0 = 0; d0 < kv.dim_k; d0 += 8) {
    const int64_t n = std::min<int64_t>(8, kv.dim_k - d0);
    for (int half = 0; half < 2; ++half) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        const int64_t at = rows[8 * half + i] + d0;
        r[i] = n == 8 ? load8<F16>(kv.k, at) : load_part<F16>(kv.k, at, n);
      }
      transpose8(r);
      // (Whole chunks apart: a store loop of a run-time count becomes a slow rep movs.)
      if (n == 8)
        for (int j = 0; j < 8; ++j) _mm256_store_ps(kt + (d0 + j) * kTile + 8 * half, r[j]);
      else
        for (int64_t j = 0; j < n; ++j) _mm256_store_ps(kt + (d0 + j) * kTile + 8 * half, r[j]);
    }
  }
}

// scores[g·n_pos + i] = scale · q_g·k_i for NH heads (≤ 4) over the first
// `valid` positions of kt, a lane a position: each dot product's
// multiply-adds in dimension order from zero, as a lane of the blocked
// kernels makes it (ops_attend_block_avx2.cpp, ops_avx512.cpp), so a token
// scores the same bits attended alone or in a block.
template <int NH>
inline __attribute__((always_inline)) void scores_tile(const float* q, int64_t dim_k, const float* kt, int64_t valid,
                                                       float scale, float* scores, int64_t n_pos) {
  __m256 acc[NH][2];
  for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
  for (int64_t d = 0; d < dim_k; ++d) {
    const __m256 k0 = _mm256_load_ps(kt + d * kTile), k1 = _mm256_load_ps(kt + d * kTile + 8);
    for (int g = 0; g < NH; ++g) {
      const __m256 qd = _mm256_broadcast_ss(q + g * dim_k + d);
      acc[g][0] = _mm256_fmadd_ps(qd, k0, acc[g][0]);
      acc[g][1] = _mm256_fmadd_ps(qd, k1, acc[g][1]);
    }
  }
  for (int g = 0; g < NH; ++g)
    for (int h = 0; h < 2; ++h) {
      const int64_t n = std::clamp<int64_t>(valid - 8 * h, 0, 8);
      const __m256 s = _mm256_mul_ps(acc[g][h], _mm256_set1_ps(scale));
      float* at = scores + g * n_pos + 8 * h;
      if (n == 8)
        _mm256_storeu_ps(at, s);
      else if (n > 0)
        _mm256_maskstore_ps(at, tail_mask(n), s);
    }
}

// Every head's scores in the blocked kernels' order, 16 positions at a
// time; a tile's K rows, read and transposed once, serve all heads from L1.
// The tiles of the two halves alternate (two streams).
template <bool F16>
void scores_as_blocks(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores) {
  constexpr int64_t elem = F16 ? 2 : 4;
  const auto* k_bytes = static_cast<const char*>(kv.k);
  thread_local std::vector<float> scratch;  // one tile's K rows, transposed
  if (scratch.size() < size_t(kv.dim_k * kTile + 8)) scratch.resize(size_t(kv.dim_k * kTile + 8));
  float* kt = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 31) & ~uintptr_t(31));
  const auto tile = [&](int64_t p0) {
    const int64_t valid = std::min<int64_t>(kTile, n_pos - p0);
    int64_t rows[kTile];  // positions past the cache's end repeat its last (their scores are not stored)
    for (int i = 0; i < kTile; ++i) rows[i] = std::min<int64_t>(p0 + i, n_pos - 1) * kv.k_stride;
    // The next tile of this stream, kAttendAheadBytes further on (on Zen 5 the
    // AVX-512 kernel's two tiles ahead read 64-wide rows slower here). A
    // prefetch past the cache's end is harmless: it never faults.
    const char* ahead = k_bytes + (p0 + kTile) * kv.k_stride * elem + kAttendAheadBytes;
    for (int64_t b = 0; b < kTile * kv.k_stride * elem; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
    transposed_keys<F16>(kv, rows, kt);
    for (int64_t g = 0; g < n_q; g += 4) {
      const float* qg = q + g * kv.dim_k;
      float* sg = scores + g * n_pos + p0;
      switch (std::min<int64_t>(4, n_q - g)) {
        case 1: scores_tile<1>(qg, kv.dim_k, kt, valid, scale, sg, n_pos); break;
        case 2: scores_tile<2>(qg, kv.dim_k, kt, valid, scale, sg, n_pos); break;
        case 3: scores_tile<3>(qg, kv.dim_k, kt, valid, scale, sg, n_pos); break;
        default: scores_tile<4>(qg, kv.dim_k, kt, valid, scale, sg, n_pos); break;
      }
    }
  };
  in_two_streams((n_pos + kTile - 1) / kTile, [&](int64_t i) { tile(kTile * i); });
}

constexpr int64_t kValueChunkBytes = 16 << 10;  // V rows re-read from L1 by the other slices and heads

// out_g[d0, d0 + 8·C) += Σ_p w_g[p] · v_p[d0, d0 + 8·C) over [p0, p1) for the
// G heads from out (w_g at w + g·n_pos, out_g at out + g·dim_v), each V row
// read once for all G; with kPartial the last vector has `tail` elements.
// G·C accumulator chains run at once, so their FMA latencies overlap; each
// lane still adds its positions in order, from zero at p0 = 0.
template <bool F16, int G, int C, bool kPartial>
void weigh_values(const float* w, int64_t n_pos, const KvHead& kv, int64_t d0, int64_t tail, int64_t p0, int64_t p1,
                  float* out) {
  __m256 acc[G][C];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) {
      const float* o = out + g * kv.dim_v + d0 + 8 * c;
      acc[g][c] = p0 == 0                           ? _mm256_setzero_ps()
                  : kPartial && c == C - 1 ? _mm256_maskload_ps(o, tail_mask(tail))
                                           : _mm256_loadu_ps(o);
    }
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t at = p * kv.v_stride + d0;
    // The first slice prefetches whole rows: the others read the chunk from L1.
    if (d0 == 0) prefetch_value_row(kv, p, F16 ? 2 : 4, kAttendAheadBytes);
    __m256 v[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      v[c] = kPartial && c == C - 1 ? load_part<F16>(kv.v, at + 8 * c, tail) : load8<F16>(kv.v, at + 8 * c);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m256 wg = _mm256_broadcast_ss(w + g * n_pos + p);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[g][c] = _mm256_fmadd_ps(wg, v[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) {
      float* o = out + g * kv.dim_v + d0 + 8 * c;
      if (kPartial && c == C - 1)
        _mm256_maskstore_ps(o, tail_mask(tail), acc[g][c]);
      else
        _mm256_storeu_ps(o, acc[g][c]);
    }
}

// Every dimension of G heads over [p0, p1): 8·C at a time (C = 2 keeps 8
// accumulators for 4 heads; fewer heads take wider slices), then 8, then the
// rest.
template <bool F16, int G>
void weigh_heads(const float* w, int64_t n_pos, const KvHead& kv, int64_t p0, int64_t p1, float* out) {
  constexpr int C = G <= 2 ? 4 : 2;
  int64_t d0 = 0;
  for (; d0 + 8 * C <= kv.dim_v; d0 += 8 * C) weigh_values<F16, G, C, false>(w, n_pos, kv, d0, 0, p0, p1, out);
  for (; d0 + 8 <= kv.dim_v; d0 += 8) weigh_values<F16, G, 1, false>(w, n_pos, kv, d0, 0, p0, p1, out);
  if (d0 < kv.dim_v) weigh_values<F16, G, 1, true>(w, n_pos, kv, d0, kv.dim_v - d0, p0, p1, out);
}

// Decode attention is many short rows (head_dim 64-128) per position, so the
// per-row work is what counts: K rows are read four positions at a time for
// each head (the four dot products are reduced together), and the weighted
// values of up to four heads are accumulated in registers while the
// positions stream past, each V row read once for them.
// A long cache comes from DRAM, where one stream of K rows prefetched 8 KiB
// ahead read at ~45 % of the read probe on a Xeon with AMX: the scores walk
// the 4-position groups of the two halves in turn (two streams), K and V
// rows are prefetched 2 KiB ahead (the hardware prefetchers restart at every
// 4 KiB page; docs/BENCHMARKS.md, twenty-ninth session), and the weighted
// values go through the positions in chunks whose V rows stay in L1 for the
// other dimension slices and heads (else a long context's V streams from
// memory once per slice). None of it changes a bit. In the blocked kernels'
// sum order (SumOrder::AsBlocks) the scores come from 16 K rows transposed in
// registers, a lane a position (scores_as_blocks), and softmax_in_order.

// Every head's scores in this kernel's own order (scores4), four positions
// at a time, the groups of the two halves in turn (two streams).
template <bool F16>
void scores_fastest(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores) {
  constexpr int64_t elem = F16 ? 2 : 4;
  const auto* k_bytes = static_cast<const char*>(kv.k);
  const auto group = [&](int64_t p) {
    // (A prefetch past the cache's end is harmless: it never faults.)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t b = 0; b < kv.dim_k * elem; b += 64)
        _mm_prefetch(k_bytes + (p + i) * kv.k_stride * elem + kAttendAheadBytes + b, _MM_HINT_T0);
    for (int64_t g = 0; g < n_q; ++g) _mm_storeu_ps(scores + g * n_pos + p, scores4<F16>(q + g * kv.dim_k, kv, p, scale));
  };
  in_two_streams(n_pos / 4, [&](int64_t i) { group(4 * i); });
  for (int64_t p = n_pos / 4 * 4; p < n_pos; ++p)
    for (int64_t g = 0; g < n_q; ++g) scores[g * n_pos + p] = score_at<F16>(q + g * kv.dim_k, kv, p, scale);
  for (int64_t g = 0; g < n_q; ++g) softmax(scores + g * n_pos, n_pos);
}

template <bool F16>
void attend_cache(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores,
                  float* out, SumOrder order) {
  constexpr int64_t elem = F16 ? 2 : 4;
  prefetch_head_start(kv, n_pos, elem);
  if (order == SumOrder::AsBlocks) {
    scores_as_blocks<F16>(q, n_q, kv, n_pos, scale, scores);
    softmax_in_order(scores, n_q, n_pos);
  } else {
    scores_fastest<F16>(q, n_q, kv, n_pos, scale, scores);
  }
  const int64_t chunk = std::max<int64_t>(16, kValueChunkBytes / (kv.dim_v * elem));
  for (int64_t p0 = 0; p0 < n_pos; p0 += chunk) {
    const int64_t p1 = std::min(n_pos, p0 + chunk);
    for (int64_t g = 0; g < n_q; g += 4) {
      const float* w = scores + g * n_pos;
      float* o = out + g * kv.dim_v;
      switch (std::min<int64_t>(4, n_q - g)) {
        case 1: weigh_heads<F16, 1>(w, n_pos, kv, p0, p1, o); break;
        case 2: weigh_heads<F16, 2>(w, n_pos, kv, p0, p1, o); break;
        case 3: weigh_heads<F16, 3>(w, n_pos, kv, p0, p1, o); break;
        default: weigh_heads<F16, 4>(w, n_pos, kv, p0, p1, o); break;
      }
    }
  }
  if (n_pos == 0) std::fill(out, out + n_q * kv.dim_v, 0.0f);
}

}  // namespace

void attend(const float* q, int64_t n_q, const KvHead& kv, int64_t n_pos, float scale, float* scores,
            float* out, SumOrder order) {
  kv.f16 ? attend_cache<true>(q, n_q, kv, n_pos, scale, scores, out, order)
         : attend_cache<false>(q, n_q, kv, n_pos, scale, scores, out, order);
}

}  // namespace shardlm::ops::avx2
