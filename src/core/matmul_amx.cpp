// AMX-INT8 tiles (4 and more tokens: prefill and batched decode). The
// weight panels of matmul_gemm.h are already in the layout of a B tile
// (8 rows of 16 weight rows × 4 codes), and a token's activation block is 32
// contiguous codes at a fixed stride from the next token's, so an A tile of 16
// tokens loads straight from the activations. One TDPBSUD gives the 16 × 16
// integer sums of a block; each block has its own scales, so the C tile goes
// through L1 into the same AVX-512 scaling as the VNNI tiles (bit-identical
// results). Two blocks are in flight so a tile product overlaps the scaling
// of the other. Q4_K/Q5_K take one product per 32-code sub-block, scaled by
// the sub-block's scale as in the VNNI tiles (Q6_K's 16-code sub-blocks halve
// each product and measured no faster than VNNI, so Q6_K stays there). A
// batch of 4-15 tokens is one tile of that many rows, so the tile's integer
// work costs the same for 4 tokens as for 15 and the per-token work is only
// the scaling; in prefill, tokens that do not fill 16 use the VNNI tiles.
// Chosen only after cpu.cpp got tile permission from Linux and ran a trial.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <cstddef>

#include "core/amx_tile_config.h"
#include "core/matmul_gemm.h"

namespace shardlm::matmul_impl {
namespace {

// Two products in flight, k = 0, 1: tile 3k is C (tokens × 16 int32), 3k+1
// is A (tokens × `codes` activation codes), 3k+2 is B (codes/4 rows of 16
// weight rows × 4 codes: the panel). tokens = 16 for prefill; a batch of
// fewer tokens (batched decode) gets tiles of exactly its rows, so one
// product serves all of them (rows of A and C past `tokens` would read past
// the activations).
template <int kCodes>
class TileSession {
 public:
  explicit TileSession(int64_t n_tokens) {
    const auto tokens = uint8_t(std::min<int64_t>(16, n_tokens));
    TileConfig cfg;
    for (int k = 0; k < 2; ++k) {
      cfg.rows[3 * k] = tokens, cfg.colsb[3 * k] = 64;
      cfg.rows[3 * k + 1] = tokens, cfg.colsb[3 * k + 1] = kCodes;
      cfg.rows[3 * k + 2] = kCodes / 4, cfg.colsb[3 * k + 2] = 64;
    }
    load_tile_config(cfg);
  }
  ~TileSession() { _tile_release(); }
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;
};

// The integer sums of two groups of codes (tiles k = 0, 1) for the
// configured tokens × 16 rows into c[k][token][row]: A from the activations (stride x_stride), B
// from the panel.
inline void products2(const uint8_t* a0, const uint8_t* a1, size_t x_stride, const void* b0, const void* b1,
                      int32_t (*c)[16][16]) {
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

// Both tile kinds run `tokens` rows (the session's count): 16 in prefill
// tiles, the whole batch below 16 (small_batch_tile). Each token's scaling is
// the VNNI tile's sequence, so results are bit-identical to it.
template <class P>
struct AmxBlocks32 : Blocks32<P> {
  using Base = Blocks32<P>;
  using Session = TileSession<32>;
  static constexpr bool kSmallBatchTile = true;

  template <int T>
  static void tile(const Panel32* panel, int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc) {
    if constexpr (T != 16) {
      Base::template tile<T>(panel, nb, x, x_stride, acc);
    } else {
      small_batch_tile(panel, nb, x, x_stride, T, acc);
    }
  }

  static void small_batch_tile(const Panel32* panel, int64_t nb, const uint8_t* x, size_t x_stride, int tokens,
                               __m512* acc) {
    for (int t = 0; t < tokens; ++t) acc[t] = _mm512_setzero_ps();
    // Products of a pair of blocks go to c[pair % 2] and are scaled after
    // the next pair's products were issued, so the tile unit works while the
    // vector units scale.
    alignas(64) int32_t c[2][2][16][16];
    const auto codes = [&](int64_t b) { return x + size_t(b) * sizeof(block_q8_32) + offsetof(block_q8_32, qs); };
    const auto scale = [&](int64_t pair) {
      const int64_t b0 = 2 * pair;
      for (int k = 0; k < 2 && b0 + k < nb; ++k)
        for (int t = 0; t < tokens; ++t) {
          const auto& xb = reinterpret_cast<const block_q8_32*>(x + x_stride * size_t(t))[b0 + k];
          acc[t] = Base::add_block(acc[t], _mm512_load_si512(c[pair % 2][k][t]), panel[b0 + k], xb);
        }
    };
    // An odd last block repeats itself as the second product (not scaled).
    const int64_t pairs = (nb + 1) / 2;
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const int64_t b = 2 * pair, b1 = std::min(b + 1, nb - 1);
      products2(codes(b), codes(b1), x_stride, panel[b].codes, panel[b1].codes, c[pair % 2]);
      if (pair > 0) scale(pair - 1);
    }
    scale(pairs - 1);
  }
};

template <class P>
struct AmxKQuant : KQuant<P> {
  using Base = KQuant<P>;
  using Session = TileSession<P::kSub>;
  static constexpr int kTokens = 16;
  static constexpr bool kSmallBatchTile = true;

  template <int T>
  static void tile(const PanelK* panel, int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc) {
    if constexpr (T != 16) {
      Base::template tile<T>(panel, nb, x, x_stride, acc);
    } else {
      small_batch_tile(panel, nb, x, x_stride, T, acc);
    }
  }

  static void small_batch_tile(const PanelK* panel, int64_t nb, const uint8_t* x, size_t x_stride, int tokens,
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

#pragma GCC diagnostic pop
