// AMX prefill kernels for Q8_0 and Q4_0: one TDPBSSD multiplies 16 weight
// rows by 16 tokens over one 32-element block (every block has its own
// scales, so the int32 tile is scaled into f32 accumulators block by block).
// Rows and tokens that do not fill a 16×16 tile, and decode, go to the
// AVX-512/AVX2 kernels. Chosen only after cpu.cpp got tile permission from
// Linux and ran a trial; internal linkage throughout (see matmul_avx512.cpp).
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation,
// which its own uninitialised-use warnings then flag inside the intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstddef>
#include <vector>

#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

constexpr int kTile = 16;  // weight rows and tokens per tile product

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tile 0: C, 16 rows × 16 int32. Tile 1: A, 16 weight rows × 32 codes.
// Tile 2: B, 8 rows × (16 tokens × 4 codes).
void configure_tiles() {
  TileConfig cfg;
  cfg.rows[0] = 16, cfg.colsb[0] = 64;
  cfg.rows[1] = 16, cfg.colsb[1] = 32;
  cfg.rows[2] = 8, cfg.colsb[2] = 64;
  asm volatile("" : : "r"(&cfg) : "memory");  // see trial_amx in cpu.cpp
  _tile_loadconfig(&cfg);
}

// One block of 16 tokens' activation codes in B's layout: row k/4 holds, for
// token n, codes 4·(k/4) .. 4·(k/4)+3 at bytes 4n .. 4n+3.
struct TokenBlock {
  alignas(64) int8_t b[8][64];
  float d[16];
};

void pack_tokens(const KernelArgs& a, int64_t t0, std::vector<TokenBlock>& out) {
  const int64_t nb = a.w->cols / 32;
  out.resize(size_t(nb));
  for (int n = 0; n < kTile; ++n) {
    const auto* x = reinterpret_cast<const block_q8_32*>(static_cast<const uint8_t*>(a.x) + a.x_stride * size_t(t0 + n));
    for (int64_t b = 0; b < nb; ++b) {
      for (int k = 0; k < 32; ++k) out[size_t(b)].b[k / 4][4 * n + k % 4] = x[b].qs[k];
      out[size_t(b)].d[n] = x[b].d;
    }
  }
}

// Signed codes of 16 rows for block b, as A reads them (pointer and stride).
struct Q8_0Rows {
  using Block = block_q8_0;
  static const void* codes(const MatrixView& m, int64_t r, int64_t b, int8_t (*)[32], size_t* stride) {
    *stride = m.row_stride;
    return m.row(r) + size_t(b) * sizeof(Block) + offsetof(Block, qs);
  }
};
struct Q4_0Rows {
  using Block = block_q4_0;
  static const void* codes(const MatrixView& m, int64_t r, int64_t b, int8_t (*scratch)[32], size_t* stride) {
    const __m256i eight = _mm256_set1_epi8(8), nibble = _mm256_set1_epi8(0x0F);
    for (int i = 0; i < kTile; ++i) {
      const auto& blk = reinterpret_cast<const Block*>(m.row(r + i))[b];
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
      const __m256i q = _mm256_and_si256(_mm256_setr_m128i(raw, _mm_srli_epi16(raw, 4)), nibble);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(scratch[i]), _mm256_sub_epi8(q, eight));
    }
    *stride = 32;
    return scratch;
  }
};

Kernel lower_kernel(DType type) {
  Kernel k = avx512_kernel(type);
  return k ? k : avx2_kernel(type);
}

void run_lower(const KernelArgs& a, int64_t t0, int64_t t1, int64_t r0, int64_t r1) {
  if (t0 >= t1 || r0 >= r1) return;
  KernelArgs sub = a;
  sub.x = static_cast<const uint8_t*>(a.x) + a.x_stride * size_t(t0);
  sub.n_tokens = t1 - t0;
  sub.y = a.y + t0 * a.w->rows;
  lower_kernel(a.w->type)(sub, r0, r1);
}

template <class Rows>
void kernel(const KernelArgs& a, int64_t r0, int64_t r1) {
  const MatrixView& m = *a.w;
  const int64_t tiled_tokens = a.n_tokens / kTile * kTile;
  const int64_t tiled_rows_end = r0 + (r1 - r0) / kTile * kTile;
  if (tiled_tokens > 0 && tiled_rows_end > r0) {
    configure_tiles();
    const int64_t nb = m.cols / 32;
    std::vector<TokenBlock> packed;
    alignas(64) int32_t c[kTile][kTile];
    alignas(64) int8_t scratch[kTile][32];
    alignas(64) float out[kTile];
    for (int64_t t0 = 0; t0 < tiled_tokens; t0 += kTile) {
      pack_tokens(a, t0, packed);
      for (int64_t r = r0; r < tiled_rows_end; r += kTile) {
        __m512 acc[kTile];
        for (auto& v : acc) v = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
          size_t stride = 0;
          const void* codes = Rows::codes(m, r, b, scratch, &stride);
          _tile_zero(0);
          _tile_loadd(1, codes, stride);
          _tile_loadd(2, packed[size_t(b)].b, 64);
          _tile_dpbssd(0, 1, 2);
          _tile_stored(0, c, 64);
          const __m512 dx = _mm512_loadu_ps(packed[size_t(b)].d);
          for (int i = 0; i < kTile; ++i) {
            const float dw = _cvtsh_ss(reinterpret_cast<const typename Rows::Block*>(m.row(r + i))[b].d);
            const __m512 p = _mm512_cvtepi32_ps(_mm512_load_si512(c[i]));
            acc[i] = _mm512_fmadd_ps(p, _mm512_mul_ps(dx, _mm512_set1_ps(dw)), acc[i]);
          }
        }
        for (int i = 0; i < kTile; ++i) {
          _mm512_store_ps(out, acc[i]);
          for (int j = 0; j < kTile; ++j) a.y[(t0 + j) * m.rows + r + i] = out[j];
        }
      }
    }
    _tile_release();
  }
  run_lower(a, 0, tiled_tokens, tiled_rows_end, r1);
  run_lower(a, tiled_tokens, a.n_tokens, r0, r1);
}

}  // namespace

Kernel amx_kernel(DType type) {
  const CpuCaps& caps = cpu_caps();
  if (!caps.amx_int8 || !caps.avx512_vnni) return nullptr;
  switch (type) {
    case DType::Q8_0: return kernel<Q8_0Rows>;
    case DType::Q4_0: return kernel<Q4_0Rows>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl

#pragma GCC diagnostic pop
