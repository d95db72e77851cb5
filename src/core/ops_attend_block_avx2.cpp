// Prefill attention as a blocked, matmul-shaped kernel on AVX2: the algorithm
// of ops_avx512.cpp (queries in the lanes of vectors, each cached K and V row
// read once per block, the softmax per lane over positions stored
// position-major) with AVX2's 16 registers: a block's up to 32 queries go
// through in groups of 16 lanes (two vectors of 8), each group a pass over
// the cached rows of its own; scores for 6 positions at a time, weighted
// values for 6 queries × 16 dimensions at a time.
// Every lane does the AVX-512 kernel's operations in its order (the dot
// product's multiply-adds in dimension order, the same e^x, the sums in
// position order, weights normalized before they weigh the values), so the
// two give the same bits (tested), and per token the per-token path's
// result within the reference's tolerance: a token's result does not depend
// on its block or on which of the two ISAs ran it.
// Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "core/ops_exp_avx2.h"
#include "core/ops_impl.h"
#include "core/ops_kv_avx2.h"

namespace shardlm::ops::avx2 {
namespace {

constexpr int kVec = 8;                 // floats in a vector
constexpr int kGroupLanes = 2 * kVec;   // queries of one pass over the cached rows
constexpr int kScorePositions = 6;      // 12 accumulators + 2 query vectors + a broadcast
constexpr int kValueQueries = 6;        // 6 × 2 accumulators + 2 V vectors + a broadcast
// V bytes of one chunk of positions (see ops_avx512.cpp: L1-sized re-reads).
constexpr int64_t kValueChunkBytes = 16 << 10;

// e^x for x ≤ 0 is exp_ps (core/ops_exp_avx2.h): for such x it is the AVX-512
// kernel's exp_nonpositive to the bit (the same reduction and series, 2^n
// applied in two halves rounding once as vscalefps does).

// Row p of a cached head as f32 (converted into `tmp` when the cache is f16).
template <bool kF16>
const float* cache_row(const void* base, int64_t stride, int64_t p, int64_t dim, float* tmp) {
  if constexpr (!kF16) return static_cast<const float*>(base) + p * stride;
  for (int64_t i = 0; i < dim; i += kVec) _mm256_storeu_ps(tmp + i, load8<true>(base, p * stride + i));
  return tmp;
}

// One group of up to 16 lanes of a block: lane j is the block's query
// lane0 + j (token / n_q, head % n_q).
struct Group {
  const float* q;
  int64_t q_stride, n_q;
  const KvHead* kv;
  int64_t n_pos;  // positions the block's first token sees
  float scale;
  float* out;
  int64_t out_stride;
  int64_t lane0, n_lanes;  // this group's first block lane, lanes in use (≤ 16)
  int64_t positions;       // positions the block's last token sees
};

// All-ones where lane j of `lim` sees position pos.
__m256 visible(const __m256i& lim, int64_t pos) {
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, _mm256_set1_epi32(int32_t(pos))));
}

// st[p·16 + j] = scale · q_j·k_p for kP positions from p0; mx takes the
// maximum of the scores its lanes see.
template <bool kF16, int kP>
void scores_at(const Group& g, const float* qt, int64_t p0, float* krows, float* st, const __m256i* lim, __m256* mx) {
  const KvHead& kv = *g.kv;
  const float* k[kP];
  for (int i = 0; i < kP; ++i) k[i] = cache_row<kF16>(kv.k, kv.k_stride, p0 + i, kv.dim_k, krows + i * kv.dim_k);
  __m256 acc[kP][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_ps();
  for (int64_t d = 0; d < kv.dim_k; ++d) {
    const __m256 q0 = _mm256_load_ps(qt + d * kGroupLanes), q1 = _mm256_load_ps(qt + d * kGroupLanes + kVec);
    for (int i = 0; i < kP; ++i) {
      const __m256 kd = _mm256_broadcast_ss(k[i] + d);
      acc[i][0] = _mm256_fmadd_ps(q0, kd, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(q1, kd, acc[i][1]);
    }
  }
  for (int i = 0; i < kP; ++i)
    for (int v = 0; v < 2; ++v) {
      const __m256 sc = _mm256_mul_ps(acc[i][v], _mm256_set1_ps(g.scale));
      _mm256_store_ps(st + (p0 + i) * kGroupLanes + v * kVec, sc);
      mx[v] = _mm256_blendv_ps(mx[v], _mm256_max_ps(mx[v], sc), visible(lim[v], p0 + i));
    }
}

// ot_j[d0 .. d0 + 16) += Σ_p w[p][j] · v_p[d0 .. d0 + 16) over [p0, p1) for
// the lanes [j0, j0 + kJ) (lanes past the group have zero weights).
template <bool kF16, int kJ>
void weighted_values(const Group& g, const float* w, int64_t j0, int64_t d0, int64_t p0, int64_t p1, float* ot) {
  const KvHead& kv = *g.kv;
  __m256 acc[kJ][2];
  for (int j = 0; j < kJ; ++j)
    for (int c = 0; c < 2; ++c) acc[j][c] = _mm256_loadu_ps(ot + (j0 + j) * kv.dim_v + d0 + c * kVec);
  for (int64_t p = p0; p < p1; ++p) {
    const __m256 v0 = load8<kF16>(kv.v, p * kv.v_stride + d0);
    const __m256 v1 = load8<kF16>(kv.v, p * kv.v_stride + d0 + kVec);
    const float* wp = w + p * kGroupLanes + j0;
    for (int j = 0; j < kJ; ++j) {
      const __m256 wj = _mm256_broadcast_ss(wp + j);
      acc[j][0] = _mm256_fmadd_ps(wj, v0, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(wj, v1, acc[j][1]);
    }
  }
  for (int j = 0; j < kJ; ++j)
    for (int c = 0; c < 2; ++c) _mm256_storeu_ps(ot + (j0 + j) * kv.dim_v + d0 + c * kVec, acc[j][c]);
}

template <bool kF16>
void attend_group(const Group& g, float* scratch) {
  const KvHead& kv = *g.kv;
  const int64_t n_p = g.positions;
  float* qt = scratch;                               // dim_k × 16: the queries transposed
  float* krows = qt + kv.dim_k * kGroupLanes;         // kScorePositions K rows as f32
  float* st = krows + kScorePositions * kv.dim_k;     // positions × 16 scores, then weights
  for (int64_t j = 0; j < kGroupLanes; ++j) {
    const int64_t lane = g.lane0 + j;
    const float* qj = j < g.n_lanes ? g.q + (lane / g.n_q) * g.q_stride + (lane % g.n_q) * kv.dim_k : nullptr;
    for (int64_t d = 0; d < kv.dim_k; ++d) qt[d * kGroupLanes + j] = qj ? qj[d] : 0.0f;
  }
  __m256i lim[2];
  for (int v = 0; v < 2; ++v) {
    alignas(32) int32_t limit[kVec];
    for (int64_t i = 0; i < kVec; ++i) {
      const int64_t j = v * kVec + i;
      limit[i] = int32_t(j < g.n_lanes ? g.n_pos + (g.lane0 + j) / g.n_q : 0);
    }
    lim[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(limit));
  }
  __m256 mx[2] = {_mm256_set1_ps(-std::numeric_limits<float>::infinity()),
                  _mm256_set1_ps(-std::numeric_limits<float>::infinity())};
  int64_t p = 0;
  for (; p + kScorePositions <= n_p; p += kScorePositions) scores_at<kF16, kScorePositions>(g, qt, p, krows, st, lim, mx);
  for (; p < n_p; ++p) scores_at<kF16, 1>(g, qt, p, krows, st, lim, mx);
  __m256 m[2], sum[2];
  for (int v = 0; v < 2; ++v) {
    const __m256 used = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim[v], _mm256_setzero_si256()));
    m[v] = _mm256_and_ps(used, mx[v]);  // unused lanes: 0
    sum[v] = _mm256_setzero_ps();
  }
  for (p = 0; p < n_p; ++p)
    for (int v = 0; v < 2; ++v) {
      float* sp = st + p * kGroupLanes + v * kVec;
      const __m256 e = _mm256_and_ps(visible(lim[v], p), exp_ps(_mm256_sub_ps(_mm256_load_ps(sp), m[v])));
      sum[v] = _mm256_add_ps(sum[v], e);
      _mm256_store_ps(sp, e);
    }
  __m256 inv[2];
  for (int v = 0; v < 2; ++v) inv[v] = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(sum[v], _mm256_set1_ps(1e-30f)));
  for (p = 0; p < n_p; ++p)
    for (int v = 0; v < 2; ++v) {
      float* sp = st + p * kGroupLanes + v * kVec;
      _mm256_store_ps(sp, _mm256_mul_ps(_mm256_load_ps(sp), inv[v]));
    }
  float* ot = st + n_p * kGroupLanes;  // 16 × dim_v running sums of the weighted values
  std::fill(ot, ot + kGroupLanes * kv.dim_v, 0.0f);
  const int64_t chunk = std::max<int64_t>(16, kValueChunkBytes / (kv.dim_v * (kv.f16 ? 2 : 4)));
  for (int64_t p0 = 0; p0 < n_p; p0 += chunk) {
    const int64_t p1 = std::min(n_p, p0 + chunk);
    for (int64_t j0 = 0; j0 < g.n_lanes; j0 += kValueQueries) {
      const bool full = g.n_lanes - j0 > 4;  // else 4 (lanes up to it have zero weights)
      for (int64_t d0 = 0; d0 < kv.dim_v; d0 += 2 * kVec)
        full ? weighted_values<kF16, kValueQueries>(g, st, j0, d0, p0, p1, ot)
             : weighted_values<kF16, 4>(g, st, j0, d0, p0, p1, ot);
    }
  }
  for (int64_t j = 0; j < g.n_lanes; ++j) {
    const int64_t lane = g.lane0 + j;
    std::memcpy(g.out + (lane / g.n_q) * g.out_stride + (lane % g.n_q) * kv.dim_v, ot + j * kv.dim_v,
                size_t(kv.dim_v) * sizeof(float));
  }
}

}  // namespace

bool attend_block(const float* q, int64_t q_stride, int64_t n_tok, int64_t n_q, const KvHead& kv, int64_t n_pos,
                  float scale, float* out, int64_t out_stride) {
  const int64_t n_lanes = n_tok * n_q;
  // Head dimensions in multiples of 16, as the AVX-512 kernel takes: a model
  // attends its prompts blocked or token by token whatever the ISA.
  if (n_lanes > kAttendLanes || kv.dim_k % kGroupLanes != 0 || kv.dim_v % kGroupLanes != 0) return false;
  const int64_t positions = n_pos + n_tok - 1;
  thread_local std::vector<float> scratch;
  // + 8: room to align the start to 32 bytes.
  const size_t need = size_t(kv.dim_k * kGroupLanes + kScorePositions * kv.dim_k + positions * kGroupLanes +
                             kGroupLanes * kv.dim_v + 8);
  if (scratch.size() < need) scratch.resize(need);
  auto* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 31) & ~uintptr_t(31));
  for (int64_t lane0 = 0; lane0 < n_lanes; lane0 += kGroupLanes) {
    const Group g{q, q_stride, n_q, &kv, n_pos, scale, out, out_stride,
                  lane0, std::min<int64_t>(kGroupLanes, n_lanes - lane0), positions};
    kv.f16 ? attend_group<true>(g, base) : attend_group<false>(g, base);
  }
  return true;
}

}  // namespace shardlm::ops::avx2
