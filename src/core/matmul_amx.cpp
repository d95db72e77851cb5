// AMX-INT8 tiles for the 32-element block types (4 and more tokens). The
// weight panels of matmul_gemm.h are already in the layout of a B tile
// (8 rows of 16 weight rows × 4 codes), and a token's activation block is 32
// contiguous codes at a fixed stride from the next token's, so an A tile of 16
// tokens loads straight from the activations. One TDPBSUD gives the 16 × 16
// integer sums of a block; each block has its own scales, so the C tile goes
// through L1 into the same AVX-512 scaling as the VNNI tiles (bit-identical
// results). Two blocks are in flight so a tile product overlaps the scaling
// of the other. Token counts that do not fill 16 use the VNNI tiles.
// Chosen only after cpu.cpp got tile permission from Linux and ran a trial.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <cstddef>

#include "core/matmul_gemm.h"

namespace shardlm::matmul_impl {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Per block in flight (tiles 3k..3k+2): C 16 tokens × 16 int32, A 16 tokens ×
// 32 codes, B 8 rows × 64 bytes (the panel).
class TileSession {
 public:
  TileSession() {
    TileConfig cfg;
    for (int k = 0; k < 2; ++k) {
      cfg.rows[3 * k] = 16, cfg.colsb[3 * k] = 64;
      cfg.rows[3 * k + 1] = 16, cfg.colsb[3 * k + 1] = 32;
      cfg.rows[3 * k + 2] = 8, cfg.colsb[3 * k + 2] = 64;
    }
    asm volatile("" : : "r"(&cfg) : "memory");  // see trial_amx in cpu.cpp
    _tile_loadconfig(&cfg);
  }
  ~TileSession() { _tile_release(); }
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;
};

template <class P>
struct AmxBlocks32 : Blocks32<P> {
  using Base = Blocks32<P>;
  using Session = TileSession;

  template <int T>
  static void tile(const Panel32* panel, int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc) {
    if constexpr (T != 16) {
      Base::template tile<T>(panel, nb, x, x_stride, acc);
    } else {
      for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
      alignas(64) int32_t c[2][16][16];
      const auto codes = [&](int64_t b) { return x + size_t(b) * sizeof(block_q8_32) + offsetof(block_q8_32, qs); };
      const auto scale = [&](int k, int64_t b) {
        for (int t = 0; t < T; ++t) {
          const auto& xb = reinterpret_cast<const block_q8_32*>(x + x_stride * size_t(t))[b];
          acc[t] = Base::add_block(acc[t], _mm512_load_si512(c[k][t]), panel[b], xb);
        }
      };
      
      int64_t b = 0;
      for (; b + 1 < nb; b += 2) {
        _tile_zero(0);
        _tile_loadd(1, codes(b), long(x_stride));
        _tile_loadd(2, panel[b].codes, 64);
        _tile_zero(3);
        _tile_loadd(4, codes(b + 1), long(x_stride));
        _tile_loadd(5, panel[b + 1].codes, 64);
        _tile_dpbsud(0, 1, 2);
        _tile_dpbsud(3, 4, 5);
        _tile_stored(0, c[0], 64);
        _tile_stored(3, c[1], 64);
        scale(0, b);
        scale(1, b + 1);
      }
      if (b < nb) {
        _tile_zero(0);
        _tile_loadd(1, codes(b), long(x_stride));
        _tile_loadd(2, panel[b].codes, 64);
        _tile_dpbsud(0, 1, 2);
        _tile_stored(0, c[0], 64);
        scale(0, b);
      }
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
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl

#pragma GCC diagnostic pop
