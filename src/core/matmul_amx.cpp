// AMX-INT8 tiles (4 and more tokens: prefill and batched decode). The
// weight panels of matmul_gemm.h are already in the layout of a B tile
// (8 rows of 16 weight rows × 4 codes), and a token's activation block is 32
// contiguous codes at a fixed stride from the next token's, so an A tile of 16
// tokens loads straight from the activations. One TDPBSUD gives the 16 × 16
// integer sums of a block; each block has its own scales, so the C tile goes
// through L1 into the same AVX-512 scaling as the VNNI tiles (bit-identical
// results). Four products are in flight and the scaling runs a step behind
// them (three_stages). Q4_K/Q5_K take one product per 32-code sub-block,
// scaled by the sub-block's scale as in the VNNI tiles (Q6_K's 16-code
// sub-blocks double the products per weight and measured slower than VNNI
// at every batch size, so Q6_K stays there). A batch of 4-15 tokens is one
// tile of that many rows, so the tile's integer work costs about the same
// for 4 tokens as for 15 and the per-token work is only the scaling; in
// prefill, tokens that do not fill 16 use the VNNI tiles. Chosen only after
// cpu.cpp got tile permission from Linux and ran a trial.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <cstddef>

#include "core/amx_tile_config.h"
#include "core/matmul_gemm.h"

#define SHARDLM_AMX_INLINE inline __attribute__((always_inline))

namespace shardlm::matmul_impl {
namespace {

// Four products in flight: C tiles 0-3 (tokens × 16 int32), A tiles 4-5
// (tokens × `codes` activation codes), B tiles 6-7 (codes/4 rows of 16
// weight rows × 4 codes: the panel). tokens = 16 for prefill; a batch of
// fewer tokens (batched decode) gets tiles of exactly its rows, so one
// product serves all of them (rows of A and C past `tokens` would read past
// the activations). With kPairsInPrefill, prefill sessions instead keep two
// products on three tiles each (tile 3k C, 3k+1 A, 3k+2 B: products2): the
// K-quants' 16-token tiles measured 3-10 % slower with four, those of the
// 32-element blocks 5-10 % faster.
template <int kCodes, bool kPairsInPrefill>
class TileSession {
 public:
  explicit TileSession(int64_t n_tokens) {
    const auto tokens = uint8_t(std::min<int64_t>(16, n_tokens));
    TileConfig cfg;
    if (kPairsInPrefill && tokens == 16) {
      for (int k = 0; k < 2; ++k) {
        cfg.rows[3 * k] = tokens, cfg.colsb[3 * k] = 64;
        cfg.rows[3 * k + 1] = tokens, cfg.colsb[3 * k + 1] = kCodes;
        cfg.rows[3 * k + 2] = kCodes / 4, cfg.colsb[3 * k + 2] = 64;
      }
    } else {
      for (int k = 0; k < 4; ++k) cfg.rows[k] = tokens, cfg.colsb[k] = 64;
      for (int k = 4; k < 6; ++k) cfg.rows[k] = tokens, cfg.colsb[k] = kCodes;
      for (int k = 6; k < 8; ++k) cfg.rows[k] = kCodes / 4, cfg.colsb[k] = 64;
    }
    load_tile_config(cfg);
  }
  ~TileSession() { _tile_release(); }
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;
};

// Prefill sessions with pairs: the integer sums of two groups of codes
// (tiles 3k, k = 0, 1) for 16 tokens × 16 rows into c[k][token][row]: A from the activations
// (stride x_stride), B from the panel.
SHARDLM_AMX_INLINE void products2(const uint8_t* a0, const uint8_t* a1, size_t x_stride, const void* b0,
                                  const void* b1, int32_t (*c)[16][16]) {
  _tile_zero(0);
  _tile_loadd(1, a0, long(x_stride));
  _tile_loadd(2, b0, 64);
  _tile_zero(3);
  _tile_loadd(4, a1, long(x_stride));
  _tile_loadd(5, b1, 64);
  _tile_dpbsud(0, 1, 2);
  _tile_dpbsud(3, 4, 5);
  _tile_stored(0, c[0], 64);
  _tile_stored(3, c[1], 64);
}

// Batch sessions: the integer sums of four groups of codes k = 0..3 for the configured
// tokens × 16 rows into c[k][token][row]: A from the activations at a[k]
// (stride x_stride), B (the panel) from b[k]. Tiles are not renamed, so four
// C tiles (0-3) keep four products in flight; A and B alternate between
// tiles 4, 5 and 6, 7.
SHARDLM_AMX_INLINE void products4(const uint8_t* const a[4], size_t x_stride, const void* const b[4],
                                  int32_t (*c)[16][16]) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a[0], long(x_stride));
  _tile_loadd(6, b[0], 64);
  _tile_dpbsud(0, 4, 6);
  _tile_loadd(5, a[1], long(x_stride));
  _tile_loadd(7, b[1], 64);
  _tile_dpbsud(1, 5, 7);
  _tile_loadd(4, a[2], long(x_stride));
  _tile_loadd(6, b[2], 64);
  _tile_dpbsud(2, 4, 6);
  _tile_loadd(5, a[3], long(x_stride));
  _tile_loadd(7, b[3], 64);
  _tile_dpbsud(3, 5, 7);
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
}

// Three stages over a row group's steps (a step: a few blocks), each a step
// apart: the panels of step i + 1 are unpacked (regular stores), the tile
// products of step i issued, and the C tiles of step i - 1, stored to L1 a
// step earlier, scaled. A tile load right after the stores that wrote its
// panel, or a vector load right after the tile store of its C, waits for
// those stores to leave the core; a step in between hides that wait and
// lets the tile unit multiply while the vector units unpack and scale.
// `panels(i)` returns step i's panels (unpacking them if needed), `issue(i,
// panels)` its products, `scale(i, panels)` their scaling.
template <class Panels, class Issue, class Scale>
SHARDLM_AMX_INLINE void three_stages(int64_t steps, Panels panels, Issue issue, Scale scale) {
  auto next = panels(0);
  decltype(next) cur = next, prev = next;
  for (int64_t i = 0; i < steps; ++i) {
    prev = cur;
    cur = next;
    if (i + 1 < steps) next = panels(i + 1);
    issue(i, cur);
    if (i > 0) scale(i - 1, prev);
  }
  scale(steps - 1, cur);
}

// Both tile kinds run T rows (the session's count): 16 in prefill tiles, the
// whole batch below 16 (small_batch_tile, T a constant so that the
// accumulators stay in registers). Each token's scaling is the VNNI tile's
// sequence, so results are bit-identical to it.
template <class P>
struct AmxBlocks32 : Blocks32<P> {
  using Base = Blocks32<P>;
  using Session = TileSession<32, false>;
  static constexpr bool kSmallBatchTile = true;
  static constexpr int kStepBlocks = 4;  // one products4
  static constexpr int kPairTokens = 0;  // tile<16> is the AMX tile

  template <int T>
  static void tile(const Panel32* panel, int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc) {
    if constexpr (T != 16) {
      Base::template tile<T>(panel, nb, x, x_stride, acc);
    } else {
      run<T>(nb, x, x_stride, acc, [&](int64_t b) { return panel + b; });
    }
  }

  // The row group's panels unpacked a step ahead into a ring, in L1.
  template <int T, class Src>
  static void small_batch_tile(const Src& src, int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc) {
    Panel32 ring[3][kStepBlocks];
    run<T>(nb, x, x_stride, acc, [&](int64_t b) {
      const int64_t step = b / kStepBlocks;
      Panel32* out = ring[step % 3];
      for (int64_t k = 0; k < kStepBlocks && b + k < nb; ++k) Base::unpack_block(src, b + k, out[k]);
      return static_cast<const Panel32*>(out);
    });
  }

  // panel_at(b) (b a multiple of kStepBlocks): the panels of blocks b.. of
  // that step, consecutive.
  template <int T, class PanelAt>
  SHARDLM_AMX_INLINE static void run(int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc, PanelAt panel_at) {
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    alignas(64) int32_t c[2][kStepBlocks][16][16];
    const auto codes = [&](int64_t b) { return x + size_t(b) * sizeof(block_q8_32) + offsetof(block_q8_32, qs); };
    three_stages(
        (nb + kStepBlocks - 1) / kStepBlocks, [&](int64_t i) { return panel_at(i * kStepBlocks); },
        [&](int64_t i, const Panel32* p) {
          // Blocks past the end repeat the last one (products not scaled).
          const int64_t b0 = i * kStepBlocks, last = nb - 1 - b0;
          const uint8_t* a[4];
          const void* w[4];
          for (int k = 0; k < 4; ++k) {
            const int64_t kk = std::min<int64_t>(k, last);
            a[k] = codes(b0 + kk), w[k] = p[kk].codes;
          }
          products4(a, x_stride, w, c[i % 2]);
        },
        [&](int64_t i, const Panel32* p) {
          const int64_t b0 = i * kStepBlocks;
          for (int k = 0; k < kStepBlocks && b0 + k < nb; ++k)
            for (int t = 0; t < T; ++t) {
              const auto& xb = reinterpret_cast<const block_q8_32*>(x + x_stride * size_t(t))[b0 + k];
              const __m512i isum = _mm512_add_epi32(_mm512_load_si512(c[i % 2][k][t]), Base::sum_start(xb));
              acc[t] = Base::add_block(acc[t], isum, p[k], xb);
            }
        });
  }
};

template <class P>
struct AmxKQuant : KQuant<P> {
  using Base = KQuant<P>;
  using Session = TileSession<P::kSub, true>;
  static constexpr int kTokens = 16;
  static constexpr bool kSmallBatchTile = true;

  template <int T>
  static void tile(const PanelK* panel, int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc) {
    if constexpr (T != 16) {
      Base::template tile<T>(panel, nb, x, x_stride, acc);
    } else {
      prefill_tile(panel, nb, x, x_stride, T, acc);
    }
  }

  // Prefill: the panels are unpacked already (in L2); a pair of products at
  // a time, scaled at once (measured faster here than run<16> on four C
  // tiles).
  static void prefill_tile(const PanelK* panel, int64_t nb, const uint8_t* x, size_t x_stride, int tokens,
                           __m512* acc) {
    constexpr int kGroups = P::kSub / 4, kSubs = QK_K / P::kSub;
    for (int t = 0; t < tokens; ++t) acc[t] = _mm512_setzero_ps();
    alignas(64) int32_t c[2][16][16];
    for (int64_t b = 0; b < nb; ++b) {
      const PanelK& p = panel[b];
      const uint8_t* xb = x + size_t(b) * sizeof(block_q8_K);
      const uint8_t* codes = xb + offsetof(block_q8_K, qs);
      __m512 part[16];
      for (int t = 0; t < tokens; ++t) part[t] = _mm512_setzero_ps();
      for (int s = 0; s < kSubs; s += 2) {
        products2(codes + P::kSub * s, codes + P::kSub * (s + 1), x_stride, &p.codes[kGroups * s],
                  &p.codes[kGroups * (s + 1)], c);
        for (int k = 0; k < 2; ++k)
          for (int t = 0; t < tokens; ++t)
            part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[k][t])), p.sub_scale[s + k], part[t]);
      }
      Base::finish_block(p, xb, x_stride, tokens, part, acc);
    }
  }

  // The row group's super-blocks unpacked one ahead into a ring, in L1.
  template <int T, class Src>
  static void small_batch_tile(const Src& src, int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc) {
    PanelK ring[3];
    run<T>(nb, x, x_stride, acc, [&](int64_t b) {
      Base::unpack_block(src, b, ring[b % 3]);
      return static_cast<const PanelK*>(&ring[b % 3]);
    });
  }

  // One step per super-block: a product per sub-block.
  template <int T, class PanelAt>
  SHARDLM_AMX_INLINE static void run(int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc, PanelAt panel_at) {
    constexpr int kGroups = P::kSub / 4, kSubs = QK_K / P::kSub;
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    alignas(64) int32_t c[2][kSubs][16][16];
    three_stages(
        nb, panel_at,
        [&](int64_t b, const PanelK* p) {
          const uint8_t* codes = x + size_t(b) * sizeof(block_q8_K) + offsetof(block_q8_K, qs);
          for (int s = 0; s < kSubs; s += 4) {
            const uint8_t* a[4];
            const void* w[4];
            for (int k = 0; k < 4; ++k) a[k] = codes + P::kSub * (s + k), w[k] = &p->codes[kGroups * (s + k)];
            products4(a, x_stride, w, c[b % 2] + s);
          }
        },
        // Token by token, so that one partial sum is live rather than T
        // (with T accumulators as well, 16 of each spilled).
        [&](int64_t b, const PanelK* p) {
          const uint8_t* xb = x + size_t(b) * sizeof(block_q8_K);
          for (int t = 0; t < T; ++t) {
            __m512 part = _mm512_setzero_ps();
            for (int s = 0; s < kSubs; ++s)
              part = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[b % 2][s][t])), p->sub_scale[s], part);
            Base::finish_block(*p, xb + x_stride * size_t(t), x_stride, 1, &part, &acc[t]);
          }
        });
  }
};

}  // namespace

// AMX has nothing of its own below kGemmMinTokens tokens.
Kernel amx_kernel(DType) { return nullptr; }

Kernel amx_gemm_kernel(DType type) {
  const CpuCaps& caps = cpu_caps();
  if (!caps.amx_int8 || !caps.avx512_vnni) return nullptr;
  switch (type) {
    case DType::Q4_0: return gemm<AmxBlocks32<Q4_0P>>;
    case DType::Q4_1: return gemm<AmxBlocks32<Q4_1P>>;
    case DType::Q5_0: return gemm<AmxBlocks32<Q5_0P>>;
    case DType::Q5_1: return gemm<AmxBlocks32<Q5_1P>>;
    case DType::Q8_0: return gemm<AmxBlocks32<Q8_0P>>;
    case DType::Q4_K: return gemm<AmxKQuant<Q4_KP>>;
    case DType::Q5_K: return gemm<AmxKQuant<Q5_KP>>;
    default: return nullptr;
  }
}

Kernel amx_panel_kernel(DType type) {
  const CpuCaps& caps = cpu_caps();
  if (!caps.amx_int8 || !caps.avx512_vnni) return nullptr;
  switch (type) {
    case DType::Q4_0: return gemm<AmxBlocks32<Q4_0P>, PanelGroup>;
    case DType::Q4_1: return gemm<AmxBlocks32<Q4_1P>, PanelGroup>;
    case DType::Q5_0: return gemm<AmxBlocks32<Q5_0P>, PanelGroup>;
    case DType::Q5_1: return gemm<AmxBlocks32<Q5_1P>, PanelGroup>;
    case DType::Q8_0: return gemm<AmxBlocks32<Q8_0P>, PanelGroup>;
    case DType::Q4_K: return gemm<AmxKQuant<Q4_KP>, PanelGroup>;
    case DType::Q5_K: return gemm<AmxKQuant<Q5_KP>, PanelGroup>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl

#undef SHARDLM_AMX_INLINE
#pragma GCC diagnostic pop
