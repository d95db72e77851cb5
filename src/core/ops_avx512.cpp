// Prefill attention as a blocked, matmul-shaped kernel (AVX-512). Up to 32
// query vectors (several consecutive tokens × the heads sharing one KV head)
// sit in the lanes of one or two vectors, so each cached K and V row is read
// once for the whole block, and no dot product needs a horizontal sum:
//   scores: for 8 positions at a time, Σ_d Qᵀ[d] · broadcast(k_p[d]);
//   softmax: per lane, over the positions (stored position-major), the
//   maximum taken as the scores are made;
//   output: for 12 queries × 32 dimensions at a time, Σ_p broadcast(w_p) · v_p,
//   over the positions in chunks whose V rows stay in L1/L2 while every
//   query group and dimension slice reads them (the sums go on in the same
//   order across chunks, so the chunking changes no bit).
// A token sees only its own causal prefix: the scores of later positions are
// set to exactly 0 after the exponential, so they add nothing, and a query's
// result does not depend on which other tokens share its block (every lane
// sums the same terms in the same order).
// Compiled with AVX-512 flags; internal linkage (see matmul_avx512.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/ops_exp_avx512.h"
#include "core/ops_impl.h"

namespace shardlm::ops::avx512 {
namespace {

constexpr int kVec = 16;                  // floats in a vector
constexpr int kLanes = int(kAttendLanes);  // queries in a block: kLanes / kVec vectors
static_assert(kLanes == 2 * kVec);
// 12 queries × 2 vectors of accumulators leave registers for the V row slice
// (the weights are broadcast from memory); 12 + 12 + 8 queries cover a block
// of 32 with no idle accumulators.
constexpr int kQueriesPerPass = 12, kVecsPerPass = 2;
// V bytes of one chunk of positions: with the chunk's weights that fits L1,
// so the passes over query groups and dimension slices re-read it from there
// instead of streaming a long context's rows from L3 once per pass.
constexpr int64_t kValueChunkBytes = 32 << 10;

// Row p of a cached head as f32 (converted into `tmp` when the cache is f16).
const float* cache_row(const void* base, int64_t stride, int64_t p, int64_t dim, bool f16, float* tmp) {
  if (!f16) return static_cast<const float*>(base) + p * stride;
  const auto* h = static_cast<const uint16_t*>(base) + p * stride;
  for (int64_t i = 0; i < dim; i += kVec)
    _mm512_storeu_ps(tmp + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
  return tmp;
}

// 16 elements of a cached row as f32.
__m512 cache_vec(const void* base, int64_t i, bool f16) {
  if (!f16) return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
}

struct Block {
  const float* q;
  int64_t q_stride, n_tok, n_q;
  const KvHead* kv;
  int64_t n_pos;  // positions the first token sees; token i sees n_pos + i
  float scale;
  float* out;
  int64_t out_stride;
  int64_t lanes() const { return n_tok * n_q; }
  int64_t positions() const { return n_pos + n_tok - 1; }
};

// Lane j of vector v sees the positions below lim[v]'s lane j.
__mmask16 visible(const __m512i& lim, int64_t pos) { return _mm512_cmpgt_epi32_mask(lim, _mm512_set1_epi32(int32_t(pos))); }

// st[p·kLanes + j] = scale · q_j·k_p for the kP positions from p0, lane j =
// token·n_q + head, in kV vectors of lanes; mx[v] takes the maximum of the
// scores its lanes see (exact in any order).
template <int kV, int kP>
void scores_at(const Block& b, const float* qt, int64_t p0, float* krows, float* st, const __m512i* lim, __m512* mx) {
  const KvHead& kv = *b.kv;
  const float* k[kP];
  for (int i = 0; i < kP; ++i) k[i] = cache_row(kv.k, kv.k_stride, p0 + i, kv.dim_k, kv.f16, krows + i * kv.dim_k);
  __m512 acc[kP][kV];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  for (int64_t d = 0; d < kv.dim_k; ++d) {
    __m512 qd[kV];
    for (int v = 0; v < kV; ++v) qd[v] = _mm512_load_ps(qt + d * kLanes + v * kVec);
    for (int i = 0; i < kP; ++i) {
      const __m512 kd = _mm512_set1_ps(k[i][d]);
      for (int v = 0; v < kV; ++v) acc[i][v] = _mm512_fmadd_ps(qd[v], kd, acc[i][v]);
    }
  }
  for (int i = 0; i < kP; ++i)
    for (int v = 0; v < kV; ++v) {
      const __m512 sc = _mm512_mul_ps(acc[i][v], _mm512_set1_ps(b.scale));
      _mm512_store_ps(st + (p0 + i) * kLanes + v * kVec, sc);
      mx[v] = _mm512_mask_max_ps(mx[v], visible(lim[v], p0 + i), mx[v], sc);
    }
}

// ot_j[d0 .. d0 + 16·kC) += Σ_p w[p][j] · v_p[d0 .. d0 + 16·kC) over the
// positions [p0, p1), for the queries j of [j0, j0 + kJ) (those past the block
// have all-zero weights), each V row read once per kJ queries. ot holds kLanes
// rows of dim_v running sums.
template <int kJ, int kC>
void weighted_values(const Block& b, const float* w, int64_t j0, int64_t d0, int64_t p0, int64_t p1, float* ot) {
  const KvHead& kv = *b.kv;
  __m512 acc[kJ][kC];
  for (int j = 0; j < kJ; ++j)
    for (int c = 0; c < kC; ++c) acc[j][c] = _mm512_loadu_ps(ot + (j0 + j) * kv.dim_v + d0 + c * kVec);
  for (int64_t p = p0; p < p1; ++p) {
    __m512 v[kC];
    for (int c = 0; c < kC; ++c) v[c] = cache_vec(kv.v, p * kv.v_stride + d0 + c * kVec, kv.f16);
    const float* wp = w + p * kLanes + j0;
    for (int j = 0; j < kJ; ++j) {
      const __m512 wj = _mm512_set1_ps(wp[j]);
      for (int c = 0; c < kC; ++c) acc[j][c] = _mm512_fmadd_ps(wj, v[c], acc[j][c]);
    }
  }
  for (int j = 0; j < kJ; ++j)
    for (int c = 0; c < kC; ++c) _mm512_storeu_ps(ot + (j0 + j) * kv.dim_v + d0 + c * kVec, acc[j][c]);
}

// The positions [p0, p1) for every query and dimension; a last group of
// fewer than 12 queries takes the next multiple of 4 (lanes up to it have
// zero weights and stay inside the kLanes of a row of w).
template <int kC>
void weighted_values_slice(const Block& b, const float* w, int64_t d0, int64_t p0, int64_t p1, float* ot) {
  for (int64_t j0 = 0; j0 < b.lanes(); j0 += kQueriesPerPass) {
    const int64_t rest = b.lanes() - j0;
    if (rest > 8)
      weighted_values<kQueriesPerPass, kC>(b, w, j0, d0, p0, p1, ot);
    else if (rest > 4)
      weighted_values<8, kC>(b, w, j0, d0, p0, p1, ot);
    else
      weighted_values<4, kC>(b, w, j0, d0, p0, p1, ot);
  }
}

template <int kV>
void attend_block_lanes(const Block& b, float* scratch) {
  const KvHead& kv = *b.kv;
  const int64_t n_lanes = b.lanes(), n_p = b.positions();
  float* qt = scratch;                   // dim_k × kLanes: the queries transposed
  float* krows = qt + kv.dim_k * kLanes;  // 8 K rows as f32
  float* st = krows + 8 * kv.dim_k;       // positions × kLanes scores, then weights
  // Lane by lane, so no index needs a division in the inner loop.
  for (int64_t j = 0; j < kLanes; ++j) {
    const float* qj = j < n_lanes ? b.q + (j / b.n_q) * b.q_stride + (j % b.n_q) * kv.dim_k : nullptr;
    for (int64_t d = 0; d < kv.dim_k; ++d) qt[d * kLanes + j] = qj ? qj[d] : 0.0f;
  }
  // Softmax per lane over the positions it sees (lane j, token j / n_q, sees
  // those below n_pos + token; every token sees the first n_pos): the
  // maximum as the scores are made (exact in any order), then passes for the
  // exponentials and their sums, and for the normalized weights (normalized
  // before they weigh the values, as the reference and llama.cpp do: scaling
  // the outputs instead changes their last bits, which the activations'
  // quantization can turn into visible differences). The kV vectors of lanes
  // go through each pass together, so their dependency chains (the sums must
  // stay in position order) overlap.
  __m512i lim[kV];
  for (int v = 0; v < kV; ++v) {
    alignas(64) int32_t limit[kVec];
    for (int64_t i = 0; i < kVec; ++i) {
      const int64_t j = v * kVec + i;
      limit[i] = int32_t(j < n_lanes ? b.n_pos + j / b.n_q : 0);
    }
    lim[v] = _mm512_load_si512(limit);
  }
  __m512 mx[kV];
  for (int v = 0; v < kV; ++v) mx[v] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t p = 0;
  for (; p + 8 <= n_p; p += 8) scores_at<kV, 8>(b, qt, p, krows, st, lim, mx);
  for (; p < n_p; ++p) scores_at<kV, 1>(b, qt, p, krows, st, lim, mx);
  for (int v = kV; v < kLanes / kVec; ++v)  // lanes past the block: weight 0
    for (p = 0; p < n_p; ++p) _mm512_store_ps(st + p * kLanes + v * kVec, _mm512_setzero_ps());
  __m512 m[kV], sum[kV];
  for (int v = 0; v < kV; ++v) {
    m[v] = _mm512_maskz_mov_ps(_mm512_cmpgt_epi32_mask(lim[v], _mm512_setzero_si512()), mx[v]);  // unused lanes: 0
    sum[v] = _mm512_setzero_ps();
  }
  for (p = 0; p < n_p; ++p)
    for (int v = 0; v < kV; ++v) {
      float* sp = st + p * kLanes + v * kVec;
      const __m512 e = _mm512_maskz_mov_ps(visible(lim[v], p), exp_nonpositive(_mm512_sub_ps(_mm512_load_ps(sp), m[v])));
      sum[v] = _mm512_add_ps(sum[v], e);
      _mm512_store_ps(sp, e);
    }
  __m512 inv[kV];
  for (int v = 0; v < kV; ++v) inv[v] = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_max_ps(sum[v], _mm512_set1_ps(1e-30f)));
  for (p = 0; p < n_p; ++p)
    for (int v = 0; v < kV; ++v) {
      float* sp = st + p * kLanes + v * kVec;
      _mm512_store_ps(sp, _mm512_mul_ps(_mm512_load_ps(sp), inv[v]));
    }
  float* ot = st + n_p * kLanes;  // kLanes × dim_v running sums of the weighted values
  std::fill(ot, ot + kLanes * kv.dim_v, 0.0f);
  const int64_t chunk = std::max<int64_t>(16, kValueChunkBytes / (kv.dim_v * (kv.f16 ? 2 : 4)));
  for (int64_t p0 = 0; p0 < n_p; p0 += chunk) {
    const int64_t p1 = std::min(n_p, p0 + chunk);
    int64_t d0 = 0;
    for (; d0 + kVecsPerPass * kVec <= kv.dim_v; d0 += kVecsPerPass * kVec)
      weighted_values_slice<kVecsPerPass>(b, st, d0, p0, p1, ot);
    for (; d0 < kv.dim_v; d0 += kVec) weighted_values_slice<1>(b, st, d0, p0, p1, ot);
  }
  for (int64_t j = 0; j < n_lanes; ++j)
    std::memcpy(b.out + (j / b.n_q) * b.out_stride + (j % b.n_q) * kv.dim_v, ot + j * kv.dim_v,
                size_t(kv.dim_v) * sizeof(float));
}

}  // namespace

bool attend_block(const float* q, int64_t q_stride, int64_t n_tok, int64_t n_q, const KvHead& kv, int64_t n_pos,
                  float scale, float* out, int64_t out_stride) {
  if (n_tok * n_q > kLanes || kv.dim_k % kVec != 0 || kv.dim_v % kVec != 0) return false;
  const Block b{q, q_stride, n_tok, n_q, &kv, n_pos, scale, out, out_stride};
  thread_local std::vector<float, std::allocator<float>> scratch;
  // + 16: room to align the start to 64 bytes.
  const size_t need = size_t(kv.dim_k * kLanes + 8 * kv.dim_k + b.positions() * kLanes + kLanes * kv.dim_v + 16);
  if (scratch.size() < need) scratch.resize(need);
  // 64-byte alignment for the aligned loads of qt and st.
  auto* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t(63));
  if (b.lanes() <= kVec)
    attend_block_lanes<1>(b, base);
  else
    attend_block_lanes<2>(b, base);
  return true;
}

}  // namespace shardlm::ops::avx512

#pragma GCC diagnostic pop
