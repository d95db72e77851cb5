// Weight panels and token tiles shared by the prefill / batched-decode
// kernels (n_tokens >= kGemmMinTokens): matmul_gemm_avx512.cpp (VNNI) and
// matmul_amx.cpp (AMX). Only include from files compiled with AVX-512 VNNI
// flags; everything is in an anonymous namespace so each includer keeps its
// own copy (see matmul_avx512.cpp on internal linkage).
//
// One 32-bit lane per weight row: 16 rows of a weight block are unpacked once
// into a panel where vector g holds, for every row, the 4 unsigned codes of
// elements 4g..4g+3. vpdpbusd multiplies that vector with one token's 4
// activation codes broadcast from memory (AMX reads the same panel as its B
// tile), so a block of 16 rows × 1 token costs 8 vpdpbusd plus the per-block
// scaling. The panel of a row group covers the whole row and is reused by
// every token of a chunk whose activations fit in L2, so weights are read
// from memory about once per chunk.
//
// The panel is filled from one of two sources. GGUF rows (GatheredGroup):
// 16-byte loads of four rows transposed in registers, gathers for scales and
// partial groups, so any row stride (tensor-parallel views) works; the next
// row group is prefetched while one is unpacked. That unpacking costs per
// weight whatever the token count, about as much as a one-token decode pass.
// Weights repacked at load into WeightLayout::Panels16 (PanelGroup) already
// hold each dword as a vector of 16 rows: unpacking is a load and a nibble
// mask, the group is one sequential stream, and the same one_pass serves
// decode (1-3 tokens) and batched decode.
//
// Every (row, token) result is computed by the same instruction sequence
// whatever tile, chunk or thread it falls in (AMX and vpdpbusd produce the
// same exact integer sums), so a token's result does not depend on the other
// tokens of the batch nor on the thread count.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/matmul_kernels.h"
#include "core/matmul_panel_prefetch.h"
#include "core/unrolled.h"

namespace shardlm::matmul_impl {
namespace {

// The per-block helpers below must inline into the token loops: GCC left
// the dot products and the unpackers as calls inside one_pass<8> (over the inlining
// budget), passing every vector through memory, which cost as much as the
// arithmetic.
#define SHARDLM_GEMM_INLINE inline SHARDLM_ALWAYS_INLINE  // core/unrolled.h

constexpr int kRows = 16;  // weight rows per panel, one per 32-bit lane
// Activations of one token chunk (re-read for every row group) should stay in
// L2 next to the panel.
constexpr size_t kChunkActBytes = 768u << 10;

// Reads one little-endian dword per row of a row group at a byte offset.
// Rows past the end of the matrix are masked off and read as zero.
class RowGather {
 public:
  RowGather(const MatrixView& m, int64_t r, int valid)
      : base_(m.row(r)),
        stride_(m.row_stride),
        offsets_(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                    _mm512_set1_epi32(int(m.row_stride)))),
        valid_(__mmask16((1u << valid) - 1)) {}
  SHARDLM_GEMM_INLINE __m512i at(size_t byte) const {
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid_, offsets_, base_ + byte, 1);
  }
  // The dwords at `byte` and `byte` + 4: two 64-bit gathers take half the
  // loads of two 32-bit ones, and two permutes split the halves.
  SHARDLM_GEMM_INLINE void at2(size_t byte, __m512i* first, __m512i* second) const {
    const __m512i zero = _mm512_setzero_si512();
    const __m512i lo = _mm512_mask_i32gather_epi64(zero, __mmask8(valid_), _mm512_castsi512_si256(offsets_), base_ + byte, 1);
    const __m512i hi = _mm512_mask_i32gather_epi64(zero, __mmask8(valid_ >> 8), _mm512_extracti64x4_epi64(offsets_, 1),
                                                   base_ + byte, 1);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    *first = _mm512_permutex2var_epi32(lo, even, hi);
    *second = _mm512_permutex2var_epi32(lo, _mm512_add_epi32(even, _mm512_set1_epi32(1)), hi);
  }
  // The dwords at `byte` + 0, 4, 8, 12 (out[0..3]). A full group loads 16
  // bytes of each row, four rows to a vector, and transposes 4 × 4 dwords in
  // each 128-bit lane: a third of the gathers' loads and no gather micro-ops,
  // which made the unpacking cost as much as a token's whole decode.
  SHARDLM_GEMM_INLINE void at4(size_t byte, __m512i* out) const {
    if (valid_ != __mmask16(0xFFFF)) {
      at2(byte, &out[0], &out[1]);
      at2(byte + 8, &out[2], &out[3]);
      return;
    }
    __m512i z[4];  // z[j], lane i: row 4i + j
    for (int j = 0; j < 4; ++j) {
      const uint8_t* p = base_ + byte + size_t(j) * stride_;
      __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4 * stride_)), 1);
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * stride_)), 2);
      z[j] = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 12 * stride_)), 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
  }
  // The f16 at `byte` of each row as floats. Past the block's first two
  // bytes, the dword read ends with it, so it may be a block's last two bytes.
  SHARDLM_GEMM_INLINE __m512 half(size_t byte) const {
    if (byte < 2) return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(at(byte)));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(at(byte - 2), 16)));
  }
  // The same rows, `bytes` further along.
  RowGather advanced(size_t bytes) const {
    RowGather g = *this;
    g.base_ += bytes;
    return g;
  }

 private:
  const uint8_t* base_;
  size_t stride_;
  __m512i offsets_;
  __mmask16 valid_;
};

// The pieces of one block of a 16-row group stored as panels
// (WeightLayout::Panels16), read with the RowGather interface: the byte
// offsets are the GGUF block's, each piece already a vector of 16 rows at
// 16 × its offset. The 2-byte piece (`odd`, panel_odd_piece) reads as
// zero-extended dwords.
class PanelBlock {
 public:
  PanelBlock(const uint8_t* p, size_t odd) : p_(p), odd_(odd) {}
  SHARDLM_GEMM_INLINE __m512i at(size_t byte) const {
    if (byte == odd_) return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p_ + 16 * byte)));
    return _mm512_loadu_si512(p_ + 16 * byte);
  }
  // The f16 piece at `byte` as floats.
  SHARDLM_GEMM_INLINE __m512 half(size_t byte) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p_ + 16 * byte)));
  }
  SHARDLM_GEMM_INLINE void at4(size_t byte, __m512i* out) const {
    for (int j = 0; j < 4; ++j) out[j] = at(byte + 4 * size_t(j));
  }

 private:
  const uint8_t* p_;
  size_t odd_;
};

// Prefetches the row group after the one being unpacked, as far along each
// of its rows as the unpacking has come in the current group: the gathers
// read 16 rows side by side, which the hardware prefetchers do not follow
// from memory, and this keeps a whole group's bytes in flight.
class NextRows {
 public:
  NextRows(const MatrixView& m, int64_t r, size_t block_bytes)
      : m_(m), r_(r), rows_(int(std::clamp<int64_t>(m.rows - r, 0, 16))), block_bytes_(block_bytes) {}
  void at_block(int64_t b) const {
    const size_t lo = size_t(b) * block_bytes_, hi = lo + block_bytes_;
    for (size_t line = (lo + 63) / 64 * 64; line < hi; line += 64)
      for (int i = 0; i < rows_; ++i) _mm_prefetch(reinterpret_cast<const char*>(m_.row(r_ + i)) + line, _MM_HINT_T0);
  }

 private:
  const MatrixView& m_;
  int64_t r_;
  int rows_;
  size_t block_bytes_;
};

// Where a row group's blocks come from. GatheredGroup: the GGUF rows (any
// stride), gathered and transposed, the next group prefetched meanwhile.
class GatheredGroup {
 public:
  GatheredGroup(const MatrixView& m, int64_t r, int valid)
      : rows_(m, r, valid), next_(m, r + kRows, traits(m.type).block_bytes), block_bytes_(traits(m.type).block_bytes) {}
  RowGather block(int64_t b) const {
    next_.at_block(b);
    return rows_.advanced(size_t(b) * block_bytes_);
  }

 private:
  RowGather rows_;
  NextRows next_;
  size_t block_bytes_;
};

// PanelGroup: a group of a Panels16 matrix (always 16 rows), read a block at
// a time, with matmul_panel_prefetch.h's prefetches.
class PanelGroup {
 public:
  PanelGroup(const MatrixView& m, int64_t r, int, PanelPrefetchPlan plan, size_t ahead)
      : base_(m.row(r)),
        block_bytes_(kRows * traits(m.type).block_bytes),
        odd_(panel_odd_piece(m.type)),
        prefetch_(block_bytes_, plan, ahead) {}
  SHARDLM_GEMM_INLINE PanelBlock block(int64_t b) const {
    const uint8_t* p = base_ + size_t(b) * block_bytes_;
    prefetch_.ahead_of(p);
    return PanelBlock(p, odd_);
  }
  // The same for a caller that knows the type at compile time and passes
  // block_bytes_ (kBlockBytes) and its panel_odd_piece (`odd`) as constants:
  // the prefetches' lines are then constants too, and PanelBlock::at tests
  // nothing at run time (GCC duplicated the unpacking on that test, with
  // register copies in the token loop).
  template <size_t kBlockBytes>
  SHARDLM_GEMM_INLINE PanelBlock block(int64_t b, size_t odd) const {
    const uint8_t* p = base_ + size_t(b) * kBlockBytes;
    prefetch_.ahead_of(p, kBlockBytes);
    return PanelBlock(p, odd);
  }
  // Block b for a kernel that issues its prefetches in parts: those of a
  // plan that spreads them come from prefetch_part, the others all here.
  SHARDLM_GEMM_INLINE PanelBlock block_in_parts(int64_t b, size_t odd) const {
    const uint8_t* p = base_ + size_t(b) * block_bytes_;
    prefetch_.ahead_of_unless_spread(p);
    return PanelBlock(p, odd);
  }
  // Part `part` of `parts` of block b's prefetches, for a caller that knows
  // block_bytes_ at compile time (kBlockBytes).
  template <size_t kBlockBytes>
  SHARDLM_GEMM_INLINE void prefetch_part(int64_t b, int part, int parts) const {
    prefetch_.part_if_spread(base_ + size_t(b) * kBlockBytes, part, parts, kBlockBytes);
  }

 private:
  const uint8_t* base_;
  size_t block_bytes_;
  size_t odd_;
  PanelPrefetch prefetch_;
};

// Row group r of a's matrix as Src reads it.
template <class Src>
SHARDLM_GEMM_INLINE Src group(const KernelArgs& a, int64_t r, int valid) {
  if constexpr (std::is_same_v<Src, PanelGroup>) {
    return Src(*a.w, r, valid, a.prefetch, a.prefetch_ahead);
  } else {
    return Src(*a.w, r, valid);
  }
}

SHARDLM_GEMM_INLINE __m512 f16_low(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
SHARDLM_GEMM_INLINE __m512 f16_high(__m512i v) { return f16_low(_mm512_srli_epi32(v, 16)); }
SHARDLM_GEMM_INLINE __m512i nibbles_low(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi32(0x0F0F0F0F)); }
SHARDLM_GEMM_INLINE __m512i nibbles_high(__m512i v) { return nibbles_low(_mm512_srli_epi32(v, 4)); }

// codes + 16 in byte i of each lane where bit 4n + i of v's lane is set
// (n = 0..7): the lane's byte n/2 copied to its four bytes (vpshufb), each
// byte tested for its own bit (vptestmb), 16 added under that mask. Three
// instructions, where shifting the nibble out and spreading its bits with a
// multiply took seven uops (vpmulld is two).
SHARDLM_GEMM_INLINE __m512i add_bit4_of_nibble(__m512i codes, __m512i v, int n) {
  const int32_t b = 0x01010101 * (n / 2);
  const __m512i spread = _mm512_shuffle_epi8(v, _mm512_set4_epi32(0x0C0C0C0C + b, 0x08080808 + b, 0x04040404 + b, b));
  const __mmask64 set = _mm512_test_epi8_mask(spread, _mm512_set1_epi32(int32_t(0x08040201u << (4 * (n % 2)))));
  return _mm512_mask_add_epi8(codes, set, codes, _mm512_set1_epi8(16));
}

SHARDLM_GEMM_INLINE int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Dword i (0..3) of each 128-bit lane of v, in every dword of its lane.
SHARDLM_GEMM_INLINE __m512i lane_dword(__m512i v, int i) {
  switch (i) {
    case 0: return _mm512_shuffle_epi32(v, _MM_PERM_AAAA);
    case 1: return _mm512_shuffle_epi32(v, _MM_PERM_BBBB);
    case 2: return _mm512_shuffle_epi32(v, _MM_PERM_CCCC);
    default: return _mm512_shuffle_epi32(v, _MM_PERM_DDDD);
  }
}

// acc + vpdpbusd(w, the 4 codes at a broadcast), the broadcast embedded
// ({1to16}): one fused uop and no register for it.
SHARDLM_GEMM_INLINE __m512i dpbusd_broadcast(__m512i acc, __m512i w, const int8_t* a) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int8_t(*)[4]>(a)));
  return acc;
}

// ---- 32-element blocks ------------------------------------------------------
// u: the unsigned codes. Offset types (Q4_0 −8, Q5_0 −16, Q8_0 −128 after
// shifting its signed codes up by 128): y += d_w·d_x·Σ(u − offset)·a, one
// exact integer sum started from −offset·Σa (block_q8_32::minus8_sum).
// Minimum types (Q4_1, Q5_1): y += d_w·d_x·Σu·a + m·s_f16.

struct alignas(64) Panel32 {
  __m512i codes[8];
  __m512 scale;
  __m512 bias;  // the minimum (Q4_1, Q5_1 only)
};

// Elements 4h..4h+3 are the low nibbles of qs dword h, 16+4h.. its high ones.
template <class G>
SHARDLM_GEMM_INLINE void unpack_nibbles(const G& g, size_t qs, Panel32& p) {
  __m512i q[4];
  g.at4(qs, q);
  for (int h = 0; h < 4; ++h) {
    p.codes[h] = nibbles_low(q[h]);
    p.codes[h + 4] = nibbles_high(q[h]);
  }
}

struct Q4_0P {
  using Block = block_q4_0;
  static constexpr bool kMinimum = false;
  static constexpr int kOffsetShift = 0;  // offset 8 << kOffsetShift
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack(const G& g, Panel32& p) {
    p.scale = g.half(0);
    unpack_nibbles(g, 2, p);
  }
};
struct Q4_1P {
  using Block = block_q4_1;
  static constexpr bool kMinimum = true;
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack(const G& g, Panel32& p) {
    const __m512i dm = g.at(0);
    p.scale = f16_low(dm);
    p.bias = f16_high(dm);
    unpack_nibbles(g, 4, p);
  }
};
// Q5: element j's 5th bit is bit j of qh; elements 4h..4h+3 come from the low
// nibbles of qs dword h, elements 16+4h.. from its high nibbles.
template <size_t kQh, size_t kQs, class G>
SHARDLM_GEMM_INLINE void unpack_q5(const G& g, Panel32& p) {
  const __m512i qh = g.at(kQh);
  unpack_nibbles(g, kQs, p);
  for (int h = 0; h < 8; ++h) p.codes[h] = add_bit4_of_nibble(p.codes[h], qh, h);
}
struct Q5_0P {
  using Block = block_q5_0;
  static constexpr bool kMinimum = false;
  static constexpr int kOffsetShift = 1;
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack(const G& g, Panel32& p) {
    p.scale = g.half(0);
    unpack_q5<2, 6>(g, p);
  }
};
struct Q5_1P {
  using Block = block_q5_1;
  static constexpr bool kMinimum = true;
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack(const G& g, Panel32& p) {
    const __m512i dm = g.at(0);
    p.scale = f16_low(dm);
    p.bias = f16_high(dm);
    unpack_q5<4, 8>(g, p);
  }
};
struct Q8_0P {
  using Block = block_q8_0;
  static constexpr bool kMinimum = false;
  static constexpr int kOffsetShift = 4;
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack(const G& g, Panel32& p) {
    p.scale = g.half(0);
    g.at4(2, &p.codes[0]);
    g.at4(18, &p.codes[4]);
    for (int h = 0; h < 8; ++h) p.codes[h] = _mm512_xor_si512(p.codes[h], _mm512_set1_epi32(int(0x80808080)));
  }
};

// kLoads: how one_pass's vpdpbusd get a token's activation codes
// (matmul_kernels.h's ActivationLoads, timed per CPU in
// matmul_activation_loads.cpp); the tiles of 9+ tokens always spread.
template <class P, ActivationLoads kLoads = ActivationLoads::kSpreadQuad>
struct Blocks32 {
  using Panel = Panel32;
  using Broadcasting = Blocks32<P, ActivationLoads::kBroadcast>;
  struct Session {
    explicit Session(int64_t) {}
  };
  static constexpr bool kSmallBatchTile = false;  // see gemm()
  static constexpr int kTokens = 16;  // 16 accumulators + 8 code vectors fit the 32 registers
  // tile_pair's tokens: 8 chains and 8 accumulators (4-7 measured within
  // the noise of each other here, 4 best: docs/bench/pre5.md).
  static constexpr int kPairTokens = 4;
  static int64_t panels(int64_t cols) { return cols / 32; }
  template <class Src>
  SHARDLM_GEMM_INLINE static void unpack_block(const Src& src, int64_t b, Panel32& out) {
    if constexpr (std::is_same_v<Src, PanelGroup>) {
      P::unpack(src.template block<kRows * sizeof(typename P::Block)>(b, panel_odd_piece(sizeof(typename P::Block), 32)),
                out);
    } else {
      P::unpack(src.block(b), out);
    }
  }
  template <class Src>
  static void unpack(const Src& src, int64_t cols, Panel32* out) {
    for (int64_t b = 0; b < cols / 32; ++b) unpack_block(src, b, out[b]);
  }

  // What a block's integer sum starts from: −offset·Σa (offset types), 0
  // (minimum types).
  SHARDLM_GEMM_INLINE static __m512i sum_start(const block_q8_32& xb) {
    if constexpr (P::kMinimum) {
      return _mm512_setzero_si512();
    } else {
      const __m512i s = _mm512_set1_epi32(xb.minus8_sum);
      return P::kOffsetShift ? _mm512_slli_epi32(s, P::kOffsetShift) : s;
    }
  }

  // acc + the block's integer sums `isum` (16 rows of one token, from
  // sum_start), scaled. Every tile (VNNI or AMX) scales with this same
  // sequence.
  SHARDLM_GEMM_INLINE static __m512 add_block(__m512 acc, __m512i isum, const Panel32& p, const block_q8_32& xb) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(p.scale, _mm512_set1_ps(xb.d)), acc);
    if constexpr (P::kMinimum) acc = _mm512_fmadd_ps(p.bias, _mm512_set1_ps(xb.s_f16), acc);
    return acc;
  }

  // acc[t] (16 rows of token t) += block b's products.
  template <int T>
  SHARDLM_GEMM_INLINE static void block(const Panel32& p, int64_t b, const uint8_t* x, size_t x_stride, __m512* acc) {
    __m512i w[8];
    for (int g = 0; g < 8; ++g) w[g] = _mm512_load_si512(&p.codes[g]);
    const uint8_t* xb = x + size_t(b) * sizeof(block_q8_32);
    // Tokens at a time and chains per token: as many chains as the 32
    // registers hold next to the 8 code vectors and T accumulators.
    if constexpr (T <= 6) {
      block_tokens<T, 2>(w, p, xb, x_stride, acc);
    } else if constexpr (T <= 8) {
      block_tokens<T, 1>(w, p, xb, x_stride, acc);
    } else {
      static_assert(T % 4 == 0);
      for (int t = 0; t < T; t += 4) block_tokens<4, 1>(w, p, xb + x_stride * size_t(t), x_stride, acc + t);
    }
  }

  // acc[t] += the block's products for tokens t < T, whose blocks are x_stride
  // apart from xb, in kChains vpdpbusd chains a token. The chains of all the
  // tokens are interleaved, so each waits on its latency while the others
  // issue. Each chain past the first costs a zeroing and an add per token,
  // vector-ALU uops on the two ports vpdpbusd needs.
  template <int T, int kChains>
  SHARDLM_GEMM_INLINE static void block_tokens(const __m512i* w, const Panel32& p, const uint8_t* xb, size_t x_stride,
                                               __m512* acc) {
    static_assert(kChains == 1 || kChains == 2);
    // Embedded broadcasts pay at 4-6 tokens with two chains each, not at 1-3
    // tokens nor with one chain a token (docs/bench/vnni8.md).
    constexpr bool kEmbedBroadcast = T >= 4 && kChains == 2;
    const block_q8_32* xt[T];
    __m512i s[T][kChains];
    for (int t = 0; t < T; ++t) {
      xt[t] = reinterpret_cast<const block_q8_32*>(xb + x_stride * size_t(t));
      s[t][0] = sum_start(*xt[t]);
      if constexpr (kChains == 2) s[t][1] = _mm512_setzero_si512();
    }
    // kSpreadQuad: a token's codes 0..15 are one 16-byte load to all four
    // lanes, each dword then spread by a vpshufd; codes 16..31 are
    // broadcast from memory. On Zen 5 loads issue at vpdpbusd's rate, and
    // with every dword a load of its own (plus the codes, the scales and the
    // prefetches) loads bounded the loop; in registers all eight, the
    // shuffles would bound it instead. On a Xeon with AMX the vpshufd take
    // port 5, one of vpdpbusd's two, and a broadcast per dword (kBroadcast)
    // is 10-15 % faster at 4-8 tokens. One token (decode) waits on the
    // weights' stream, not on the ports: there the spread measured slower
    // from DRAM on Zen 5 (docs/bench/bat7.md), so it always broadcasts.
    constexpr int kSpread = T >= 2 && kLoads == ActivationLoads::kSpreadQuad ? 4 : 0;  // dwords spread from the quad
    __m512i low_quad[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t)
      if (kSpread) low_quad[t] = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xt[t]->qs)));
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g)
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        __m512i& sum = s[t][g % kChains];
        if (g < kSpread) {
          sum = _mm512_dpbusd_epi32(sum, w[g], lane_dword(low_quad[t], g));
        } else {
          sum = kEmbedBroadcast ? dpbusd_broadcast(sum, w[g], xt[t]->qs + 4 * g)
                                : _mm512_dpbusd_epi32(sum, w[g], _mm512_set1_epi32(load_i32(xt[t]->qs + 4 * g)));
        }
      }
    for (int t = 0; t < T; ++t) {
      const __m512i isum = kChains == 2 ? _mm512_add_epi32(s[t][0], s[t][kChains - 1]) : s[t][0];
      acc[t] = add_block(acc[t], isum, p, *xt[t]);
    }
  }

  // acc[t] (16 rows of token t) over every block of the row group.
  template <int T>
  static void tile(const Panel32* panel, int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc) {
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) block<T>(panel[b], b, x, x_stride, acc);
  }

  // Two row groups (panels pa, pb) × T tokens: acc[t] rows of pa, acc[T + t]
  // rows of pb, over every block of the row group.
  template <int T>
  static void tile_pair(const Panel32* pa, const Panel32* pb, int64_t nb, const uint8_t* x, size_t x_stride,
                        __m512* acc) {
    for (int t = 0; t < 2 * T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) block_pair<T>(pa[b], pb[b], b, x, x_stride, acc, acc + T);
  }

  // acc_a[t] (rows of pa) and acc_b[t] (rows of pb) += block b's products
  // for tokens t < T. Each activation broadcast feeds a product of both
  // groups, and the two groups' chains of every token interleave: 2T chains
  // where one group has T. On Zen 5 vector loads issue two a cycle, as
  // vpdpbusd does, and the 16-row tiles need one load a product plus the
  // scaling's, so loads bound them at ~50-60 % of the products' rate; on a
  // Xeon with AMX one group's 8 tokens (8 chains of 8 vpdpbusd, ~5 cycles
  // each, measured) left the two ports idle about a quarter of the time
  // (docs/BENCHMARKS.md, twenty-seventh session). The per-token
  // arithmetic is block_tokens<T, 1>'s for each group, so the same bits.
  template <int T>
  SHARDLM_GEMM_INLINE static void block_pair(const Panel32& pa, const Panel32& pb, int64_t b, const uint8_t* x,
                                             size_t x_stride, __m512* acc_a, __m512* acc_b) {
    const uint8_t* xb = x + size_t(b) * sizeof(block_q8_32);
    const block_q8_32* xt[T];
    __m512i s[2][T];
    for (int t = 0; t < T; ++t) {
      xt[t] = reinterpret_cast<const block_q8_32*>(xb + x_stride * size_t(t));
      s[0][t] = s[1][t] = sum_start(*xt[t]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m512i wa = _mm512_load_si512(&pa.codes[g]), wb = _mm512_load_si512(&pb.codes[g]);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const __m512i a = _mm512_set1_epi32(load_i32(xt[t]->qs + 4 * g));
        s[0][t] = _mm512_dpbusd_epi32(s[0][t], wa, a);
        s[1][t] = _mm512_dpbusd_epi32(s[1][t], wb, a);
      }
    }
    for (int t = 0; t < T; ++t) {
      acc_a[t] = add_block(acc_a[t], s[0][t], pa, *xt[t]);
      acc_b[t] = add_block(acc_b[t], s[1][t], pb, *xt[t]);
    }
  }
};

// ---- K-quants (256-element super-blocks) ------------------------------------
// Σ_sub (d·scale)·Σ(u·a) over sub-blocks of kSub elements with unsigned codes
// u, plus one integer term from the activations' 16-element sums (bsums):
// Q4_K/Q5_K subtract dmin·Σ min·bsum, Q6_K its offset 32·d·Σ scale·bsum.
// The pairs of int16 factors for those 16 sums go through vpdpwssd.
//
// In one_pass from 4 tokens, the vpdpbusd of a Q4_K/Q5_K sub-block are not
// a fresh pair of chains per sub-block and token (two zeroed accumulators
// and a join each): a chain runs through 64 codes (2 sub-blocks) and each
// sub-block's sum is the difference of the running sums at its ends, one
// vpsubd. The integers are exact, so the sums, and the scaling after them,
// are those of every other tile (AMX included).
constexpr int kChainCodes = 64;
constexpr int kChains = QK_K / kChainCodes;
constexpr int kCodeVectors = QK_K / 4;  // a super-block's code vectors (16 rows × 4 codes each)

struct alignas(64) PanelK {
  __m512i codes[kCodeVectors];
  __m512 sub_scale[16];  // d·scale per sub-block (kSub = 32 uses 8)
  __m512i pair_factor[8];  // int16 factors of bsums[2p], bsums[2p+1]
  __m512 pair_scale;       // what Σ factor·bsum is multiplied by
};

// Bits from..from+n-1 of each byte moved to bits to..to+n-1, every other bit
// cleared by `keep` (those n bits in every byte): one shift and a mask, where
// shifting down, masking and shifting up took three. With both ranges inside
// a byte, the bits a shift brings in from a neighbouring byte all land where
// `keep` clears them.
SHARDLM_GEMM_INLINE __m512i byte_bits_moved(__m512i v, int from, int to, int keep) {
  const __m512i moved = from < to   ? _mm512_slli_epi32(v, unsigned(to - from))
                        : from > to ? _mm512_srli_epi32(v, unsigned(from - to))
                                    : v;
  return _mm512_and_si512(moved, _mm512_set1_epi32(keep));
}
// (low & 0x0F) | high per byte in one vpternlogd (0xEA: A·B + C).
SHARDLM_GEMM_INLINE __m512i nibble_or(__m512i low, __m512i high) {
  return _mm512_ternarylogic_epi32(low, _mm512_set1_epi32(0x0F0F0F0F), high, 0xEA);
}

// The 6-bit scales and mins of a Q4_K/Q5_K super-block (quant_blocks.h,
// get_scale_min_k4) as bytes, from its 12 scale bytes as three dwords per
// row: byte i of sc[0] is scale i, of sc[1] scale 4 + i; mn likewise. Scales
// 4-7 are the low nibbles of s[2] under bits 6-7 of s[0]'s bytes (a bitwise
// select, 0xCA: A ? B : C), mins 4-7 its high nibbles under s[1]'s. Nine
// vector instructions for the 16 fields, where one field at a time took
// 2-12 each.
SHARDLM_GEMM_INLINE void scale_min_bytes_k4(const __m512i s[3], __m512i sc[2], __m512i mn[2]) {
  const __m512i six = _mm512_set1_epi32(0x3F3F3F3F), low4 = _mm512_set1_epi32(0x0F0F0F0F);
  sc[0] = _mm512_and_si512(s[0], six);
  mn[0] = _mm512_and_si512(s[1], six);
  sc[1] = _mm512_and_si512(_mm512_ternarylogic_epi32(low4, s[2], _mm512_srli_epi32(s[0], 2), 0xCA), six);
  mn[1] = _mm512_and_si512(
      _mm512_ternarylogic_epi32(low4, _mm512_srli_epi32(s[2], 4), _mm512_srli_epi32(s[1], 2), 0xCA), six);
}
// Byte i (0..3) of each dword of v, zero-extended to the dword; the pair
// form puts it in both 16-bit halves (a vpdpwssd factor for two bsums).
SHARDLM_GEMM_INLINE __m512i dword_byte(__m512i v, int i) {
  const int32_t z = int32_t(0x80808000u | unsigned(i));
  return _mm512_shuffle_epi8(v, _mm512_set4_epi32(z + 12, z + 8, z + 4, z));
}
SHARDLM_GEMM_INLINE __m512i dword_byte_pair(__m512i v, int i) {
  const int32_t z = int32_t(0x80008000u | unsigned(i) | unsigned(i) << 16);
  return _mm512_shuffle_epi8(v, _mm512_set4_epi32(z + 0x000C000C, z + 0x00080008, z + 0x00040004, z));
}

// Q4_K and Q5_K: sub-block s (32 elements) takes nibble s%2 of qs bytes
// 32·(s/2) .. +31; Q5_K's 5th bit of element e is bit e/32 of qh[e%32].
// q45_k_codes: sub-block `sub`'s codes from the qs dwords q (and Q5_K's qh
// dwords); code_q45_k: code vector i (0..63), group i%8 of sub-block i/8.
template <bool kQ5>
SHARDLM_GEMM_INLINE __m512i q45_k_codes(__m512i q, __m512i qh, int sub) {
  const __m512i nibble = sub % 2 ? _mm512_srli_epi32(q, 4) : q;
  if (!kQ5) return nibbles_low(nibble);
  return nibble_or(nibble, byte_bits_moved(qh, sub, 4, 0x10101010));
}
template <bool kQ5, class G>
SHARDLM_GEMM_INLINE __m512i code_q45_k(const G& g, int i) {
  constexpr size_t kQh = 16, kQs = kQ5 ? 48 : 16;
  const int sub = i / 8, gi = i % 8;
  const __m512i qh = kQ5 ? g.at(kQh + 4 * size_t(gi)) : _mm512_setzero_si512();
  return q45_k_codes<kQ5>(g.at(kQs + 32 * size_t(sub / 2) + 4 * size_t(gi)), qh, sub);
}
// The scales of a Q4_K/Q5_K super-block (everything of PanelK but the codes).
template <class G>
SHARDLM_GEMM_INLINE void scales_q45_k(const G& g, PanelK& p) {
  const __m512i dd = g.at(0);
  const __m512 d = f16_low(dd);
  p.pair_scale = _mm512_sub_ps(_mm512_setzero_ps(), f16_high(dd));
  const __m512i s[3] = {g.at(4), g.at(8), g.at(12)};
  __m512i sc[2], mn[2];
  scale_min_bytes_k4(s, sc, mn);
  for (int j = 0; j < 8; ++j) {
    p.sub_scale[j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(dword_byte(sc[j / 4], j % 4)));
    p.pair_factor[j] = dword_byte_pair(mn[j / 4], j % 4);  // both 16-sums of sub-block j
  }
}
template <bool kQ5, class G>
SHARDLM_GEMM_INLINE void unpack_q45_k(const G& g, PanelK& p) {
  constexpr size_t kQh = 16, kQs = kQ5 ? 48 : 16;
  scales_q45_k(g, p);
  // Gathered rows read four dwords at a time (at4: one gather and a
  // transpose), so the codes are made from those here, not by code_q45_k.
  __m512i qh[8], q[4][8];
  for (int gi = 0; gi < 8; gi += 4) {
    if (kQ5) g.at4(kQh + 4 * size_t(gi), &qh[gi]);
    for (int k = 0; k < 4; ++k) g.at4(kQs + 32 * size_t(k) + 4 * size_t(gi), &q[k][gi]);
  }
  for (int gi = 0; gi < 8; ++gi)
    for (int sub = 0; sub < 8; ++sub)
      p.codes[8 * sub + gi] = q45_k_codes<kQ5>(q[sub / 2][gi], kQ5 ? qh[gi] : _mm512_setzero_si512(), sub);
}

// Q6_K: element e = 128h + 32·quarter + l has its low 4 bits in nibble
// quarter/2 of ql[64h + 32·(quarter%2) + l], its top 2 in bits 2·quarter of
// qh[32h + l]; codes are u − 32 with 16 signed 8-bit scales. q6_k_codes: a
// quarter's codes from the ql dwords of its half (quarter % 2) and the qh
// dwords; code_q6_k: code vector i, group i%8 of quarter (i/8)%4 of half i/32.
SHARDLM_GEMM_INLINE __m512i q6_k_codes(__m512i ql, __m512i qh, int quarter) {
  return nibble_or(quarter / 2 ? _mm512_srli_epi32(ql, 4) : ql, byte_bits_moved(qh, 2 * quarter, 4, 0x30303030));
}
template <class G>
SHARDLM_GEMM_INLINE __m512i code_q6_k(const G& g, int i) {
  const int h = i / 32, quarter = i / 8 % 4, gi = i % 8;
  return q6_k_codes(g.at(64 * size_t(h) + 32 * size_t(quarter % 2) + 4 * size_t(gi)),
                    g.at(128 + 32 * size_t(h) + 4 * size_t(gi)), quarter);
}
template <class G>
SHARDLM_GEMM_INLINE void scales_q6_k(const G& g, PanelK& p) {
  const __m512 d = g.half(208);  // d is the last 2 of the block's 210 bytes
  p.pair_scale = _mm512_mul_ps(d, _mm512_set1_ps(-32.0f));
  __m512i sc[16];
  for (int w = 0; w < 4; ++w) {
    const __m512i v = g.at(192 + 4 * size_t(w));
    for (int k = 0; k < 4; ++k) sc[4 * w + k] = _mm512_srai_epi32(_mm512_slli_epi32(v, unsigned(24 - 8 * k)), 24);
  }
  for (int s = 0; s < 16; ++s) p.sub_scale[s] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc[s]));
  for (int q = 0; q < 8; ++q)
    p.pair_factor[q] = _mm512_or_si512(_mm512_and_si512(sc[2 * q], _mm512_set1_epi32(0xFFFF)),
                                       _mm512_slli_epi32(sc[2 * q + 1], 16));
}

// Q4_K's unpacking is forced inline (GCC left it a call that wrote the whole
// panel out: half of one_pass<1>'s time; inlined, 1 token 1.4x faster in
// cache). Q5_K's and Q6_K's measured no faster inlined and stay calls
// (docs/bench/dec5.md). `code` gives vector i where the dot products take
// it, for one_pass with the codes in place (KQuantCodes).
struct Q4_KP {
  using Block = block_q4_K;
  static constexpr int kSub = 32;
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack(const G& g, PanelK& p) { unpack_q45_k<false>(g, p); }
  template <class G>
  SHARDLM_GEMM_INLINE static void scales(const G& g, PanelK& p) { scales_q45_k(g, p); }
  template <class G>
  SHARDLM_GEMM_INLINE static __m512i code(const G& g, int i) { return code_q45_k<false>(g, i); }
};
struct Q5_KP {
  using Block = block_q5_K;
  static constexpr int kSub = 32;
  template <class G>
  static void unpack(const G& g, PanelK& p) { unpack_q45_k<true>(g, p); }
  template <class G>
  SHARDLM_GEMM_INLINE static void scales(const G& g, PanelK& p) { scales_q45_k(g, p); }
  template <class G>
  SHARDLM_GEMM_INLINE static __m512i code(const G& g, int i) { return code_q45_k<true>(g, i); }
};
struct Q6_KP {
  using Block = block_q6_K;
  static constexpr int kSub = 16;
  template <class G>
  static void unpack(const G& g, PanelK& p) {
    scales_q6_k(g, p);
    for (int h = 0; h < 2; ++h) {
      __m512i qh[8], ql[2][8];
      for (int gi = 0; gi < 8; gi += 4) {
        g.at4(128 + 32 * size_t(h) + 4 * size_t(gi), &qh[gi]);
        for (int half = 0; half < 2; ++half) g.at4(64 * size_t(h) + 32 * size_t(half) + 4 * size_t(gi), &ql[half][gi]);
      }
      for (int gi = 0; gi < 8; ++gi)
        for (int quarter = 0; quarter < 4; ++quarter)
          p.codes[32 * h + 8 * quarter + gi] = q6_k_codes(ql[quarter % 2][gi], qh[gi], quarter);
    }
  }
  template <class G>
  SHARDLM_GEMM_INLINE static void scales(const G& g, PanelK& p) { scales_q6_k(g, p); }
  template <class G>
  SHARDLM_GEMM_INLINE static __m512i code(const G& g, int i) { return code_q6_k(g, i); }
};

// kCodes: where one_pass from panels makes a super-block's codes
// (matmul_kernels.h KQuantCodes, chosen per CPU); InPlace names the other.
template <class P, KQuantCodes kCodes = KQuantCodes::kThroughPanel>
struct KQuant {
  using Panel = PanelK;
  using InPlace = KQuant<P, KQuantCodes::kInPlace>;
  struct Session {
    explicit Session(int64_t) {}
  };
  static constexpr bool kSmallBatchTile = false;  // see gemm()
  static constexpr int kTokens = 8;  // 8 accumulators + 8 partial sums + 8 code vectors
  static constexpr int kPairTokens = 0;  // no tile_pair
  static int64_t panels(int64_t cols) { return cols / QK_K; }
  template <class Src>
  SHARDLM_GEMM_INLINE static void unpack_block(const Src& src, int64_t b, PanelK& out) {
    P::unpack(src.block(b), out);
  }
  template <class Src>
  static void unpack(const Src& src, int64_t cols, PanelK* out) {
    for (int64_t b = 0; b < cols / QK_K; ++b) unpack_block(src, b, out[b]);
  }

  static constexpr int kSubsPerChain = kChainCodes / P::kSub;
  static constexpr size_t kOdd = panel_odd_piece(sizeof(typename P::Block), QK_K);

  // one_pass from panels with the codes in place: block b's codes made where
  // block() multiplies them, only its scales in `p`. Writing the 64 code
  // vectors to PanelK and reading them back held Q5_K's decode to ~2/3 of
  // Q4_K's rate in cache; with more tokens, making them in place takes
  // registers the token loop needs, which costs more than the round trip on
  // some CPUs (Zen 5: Q6_K at 8 tokens 23 % slower) and less on others.
  template <int T>
    requires(kCodes == KQuantCodes::kInPlace)
  SHARDLM_GEMM_INLINE static void block_in_place(const PanelGroup& src, int64_t b, PanelK& p, const uint8_t* x,
                                                 size_t x_stride, __m512* acc) {
    const PanelBlock g = src.block_in_parts(b, kOdd);
    // The parts' lines are constants (1B Q4_K_M, 8 sequences 13-17 % faster
    // on the AMX Xeon than computed at run time), kept in place up to 4
    // tokens, where the step streams from DRAM (matmul_panel_prefetch.h):
    // with that, 2 and 4 tokens streamed 5-7 % (Q4_K) and 11-13 % (Q6_K)
    // faster from DRAM, although 12-27 % slower in cache; 8 tokens, bound by
    // the arithmetic, 4 % slower from DRAM, so they go without.
    const auto prefetch_part = [&](int i) SHARDLM_ALWAYS_INLINE {
      src.template prefetch_part<kRows * sizeof(typename P::Block)>(b, i, kCodeVectors);
      if constexpr (T <= 4) keep_prefetch_in_place();
    };
    prefetch_part(0);
    P::scales(g, p);
    const auto before_code = [&](int i) SHARDLM_ALWAYS_INLINE {
      if (i > 0) prefetch_part(i);
    };
    block<T, true>(p, [&](int i) { return P::code(g, i); }, b, x, x_stride, acc, before_code);
  }

  // acc[t] (16 rows of token t) += super-block b's products. The vpdpbusd
  // go round the tokens, so that consecutive ones are independent. From 7
  // tokens one chain per token runs through a whole chain of sub-blocks
  // (two per token spilled there); at 4-6 a token's chain is split in two
  // (even and odd groups, joined where a sub-block ends); below 4 each
  // sub-block starts its two chains afresh, so that the short chains of
  // decode keep both vector ports busy through vpdpbusd's latency. Q6_K's
  // 16-code sub-blocks always start afresh (faster at 4-8 tokens than
  // running through four of them: docs/bench/kq8.md).
  template <int T>
  static void block(const PanelK& p, int64_t b, const uint8_t* x, size_t x_stride, __m512* acc) {
    block<T, false>(p, [&](int i) { return _mm512_load_si512(&p.codes[i]); }, b, x, x_stride, acc, [](int) {});
  }
  // The same with code vector i from codes(i); kUnroll: the loops unrolled
  // at compile time, which codes made in place need (else their shifts and
  // offsets are picked at run time), and which made the loads from PanelK
  // slower (Q6_K at 2-8 tokens 17-23 %: larger code, more registers live).
  // before_code(i) runs before codes(i) (prefetches spread over the
  // super-block).
  template <int T, bool kUnroll, class Codes, class BeforeCode>
  SHARDLM_GEMM_INLINE static void block(const PanelK& p, const Codes& codes, int64_t b, const uint8_t* x,
                                        size_t x_stride, __m512* acc, const BeforeCode& before_code) {
    constexpr int kGroups = P::kSub / 4, kSplit = T < 7 ? 2 : 1;
    constexpr bool kFresh = T < 4 || P::kSub == 16;
    const uint8_t* xb = x + size_t(b) * sizeof(block_q8_K);
    const int8_t* a[T];
    __m512 part[T];
    for (int t = 0; t < T; ++t) {
      a[t] = reinterpret_cast<const block_q8_K*>(xb + x_stride * size_t(t))->qs;
      part[t] = _mm512_setzero_ps();
    }
    steps<kChains, kUnroll>([&](auto c) SHARDLM_ALWAYS_INLINE {
      __m512i sum[kSplit][T], before[T];  // running sums; their join at the last sub-block's end
      steps<kSubsPerChain, kUnroll>([&](auto k) SHARDLM_ALWAYS_INLINE {
        const int s = kSubsPerChain * c + k;
        if (kFresh || k == 0)
          for (int h = 0; h < kSplit; ++h)
            for (int t = 0; t < T; ++t) sum[h][t] = _mm512_setzero_si512();
        __m512i w[kGroups];
        steps<kGroups, kUnroll>([&](auto g) SHARDLM_ALWAYS_INLINE {
          before_code(kGroups * s + g);
          w[g] = codes(kGroups * s + g);
        });
        for (int g = 0; g < kGroups; ++g)
          for (int t = 0; t < T; ++t)
            sum[g % kSplit][t] = _mm512_dpbusd_epi32(sum[g % kSplit][t], w[g],
                                                     _mm512_set1_epi32(load_i32(a[t] + P::kSub * s + 4 * g)));
        for (int t = 0; t < T; ++t) {
          const __m512i joined = kSplit == 2 ? _mm512_add_epi32(sum[0][t], sum[1][t]) : sum[0][t];
          const __m512i isum = kFresh || k == 0 ? joined : _mm512_sub_epi32(joined, before[t]);
          if (!kFresh) before[t] = joined;
          part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), p.sub_scale[s], part[t]);
        }
      });
    });
    finish_block(p, xb, x_stride, T, part, acc);
  }

  template <int T>
  static void tile(const PanelK* panel, int64_t nb, const uint8_t* x, size_t x_stride, __m512* acc) {
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) block<T>(panel[b], b, x, x_stride, acc);
  }

  // acc[t] += d_x · (part[t] + the bsums term) for super-block p of `tokens` tokens
  // (x: the first token's block). Every tile (VNNI or AMX) ends a super-block
  // with this same sequence.
  static void finish_block(const PanelK& p, const uint8_t* x, size_t x_stride, int tokens, __m512* part,
                           __m512* acc) {
    __m512i f[8];
    for (int q = 0; q < 8; ++q) f[q] = _mm512_load_si512(&p.pair_factor[q]);
    for (int t = 0; t < tokens; ++t) {
      const auto& xb = *reinterpret_cast<const block_q8_K*>(x + x_stride * size_t(t));
      __m512i m = _mm512_setzero_si512();
      for (int q = 0; q < 8; ++q) m = _mm512_dpwssd_epi32(m, f[q], _mm512_set1_epi32(load_i32(xb.bsums + 2 * q)));
      part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), p.pair_scale, part[t]);
      acc[t] = _mm512_fmadd_ps(part[t], _mm512_set1_ps(xb.d), acc[t]);
    }
  }
};

// ---- driver -----------------------------------------------------------------

template <class F, int T>
void tiles(const typename F::Panel* panel, int64_t nb, const KernelArgs& a, int64_t r, int valid, int64_t t0,
           int64_t t1) {
  const auto* x = static_cast<const uint8_t*>(a.x);
  const __mmask16 mask = __mmask16((1u << valid) - 1);
  for (int64_t t = t0; t + T <= t1; t += T) {
    __m512 acc[T];
    F::template tile<T>(panel, nb, x + a.x_stride * size_t(t), a.x_stride, acc);
    for (int i = 0; i < T; ++i) _mm512_mask_storeu_ps(a.y + (t + i) * a.w->rows + r, mask, acc[i]);
  }
}

// Tokens [t0, t1) (a multiple of F::kPairTokens) of row groups r (16 rows)
// and r + 16 (valid2 rows) in tiles of both, panel the first's and
// panel + nb the second's.
template <class F>
void pair_tiles(const typename F::Panel* panel, int64_t nb, const KernelArgs& a, int64_t r, int valid2, int64_t t0,
                int64_t t1) {
  constexpr int T = F::kPairTokens;
  const auto* x = static_cast<const uint8_t*>(a.x);
  const __mmask16 mask2 = __mmask16((1u << valid2) - 1);
  for (int64_t t = t0; t < t1; t += T) {
    __m512 acc[2 * T];
    F::template tile_pair<T>(panel, panel + nb, nb, x + a.x_stride * size_t(t), a.x_stride, acc);
    for (int i = 0; i < T; ++i) {
      _mm512_storeu_ps(a.y + (t + i) * a.w->rows + r, acc[i]);
      _mm512_mask_storeu_ps(a.y + (t + i) * a.w->rows + r + kRows, mask2, acc[T + i]);
    }
  }
}

// Tokens [t0, t1) in tiles of F::kTokens, the rest in halving tiles.
template <class F, int T = F::kTokens>
void token_tiles(const typename F::Panel* panel, int64_t nb, const KernelArgs& a, int64_t r, int valid, int64_t t0,
                 int64_t t1) {
  tiles<F, T>(panel, nb, a, r, valid, t0, t1);
  if constexpr (T > 1) token_tiles<F, T / 2>(panel, nb, a, r, valid, t1 - (t1 - t0) % T, t1);
}

// S row groups from rows[0..S) (`valid` rows each) × T tokens in one pass,
// block b of each group in turn, each block multiplied as soon as it is
// unpacked (no panel of the whole row to write and read back: with so few
// tokens nothing else would reuse it). Two groups in step from 4 tokens
// multiply as a pair where F has block_pair (one activation broadcast for
// both groups' products, twice the chains): on the Xeon with AMX, 8 tokens
// of Q4_0 in L2 15 % faster, 4 tokens 24 %, and 1B Q4_0 with 8 sequences
// decoded 10 % faster. The same per-block arithmetic as the tiles, so the
// same bits.
template <class F, class Src, int T, int S>
SHARDLM_GEMM_INLINE void groups_in_step(const KernelArgs& a, const int64_t* rows, int valid) {
  const MatrixView& m = *a.w;
  const auto* x = static_cast<const uint8_t*>(a.x);
  const int64_t nb = F::panels(m.cols);
  const auto src = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::array<Src, S>{group<Src>(a, rows[I], valid)...};
  }(std::make_index_sequence<S>());
  typename F::Panel panel;
  __m512 acc[S][T];
  for (auto& group_acc : acc)
    for (auto& v : group_acc) v = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (S == 2 && T >= kGemmMinTokens && requires { &F::template block_pair<T>; }) {
      typename F::Panel second;
      F::unpack_block(src[0], b, panel);
      F::unpack_block(src[1], b, second);
      F::template block_pair<T>(panel, second, b, x, a.x_stride, acc[0], acc[1]);
      continue;
    }
    for (int g = 0; g < S; ++g) {
      if constexpr (requires { F::template block_in_place<T>(src[g], b, panel, x, a.x_stride, acc[g]); }) {
        F::template block_in_place<T>(src[g], b, panel, x, a.x_stride, acc[g]);
      } else {
        F::unpack_block(src[g], b, panel);
        F::template block<T>(panel, b, x, a.x_stride, acc[g]);
      }
    }
  }
  for (int g = 0; g < S; ++g)
    for (int t = 0; t < T; ++t)
      _mm512_mask_storeu_ps(a.y + t * m.rows + rows[g], __mmask16((1u << valid) - 1), acc[g][t]);
}

// A batch of at most F::kTokens tokens, each row group read once. With S > 1
// the rows are S stretches of whole groups walked in step (the groups left
// over one at a time): S streams of the weights instead of one, which the
// core's prefetchers follow faster on some CPUs (a Xeon with AMX: one token
// of a 400 MiB Q4_0 matrix 15.6 -> 17.5 GB/s with two; PanelStreaming times
// it).
template <class F, class Src, int T, int S = 1>
void one_pass(const KernelArgs& a, int64_t r0, int64_t r1) {
  const int64_t per = S > 1 ? (r1 - r0) / kRows / S : 0;  // groups a stretch
  for (int64_t i = 0; i < per; ++i) {
    int64_t rows[S];
    for (int g = 0; g < S; ++g) rows[g] = r0 + (g * per + i) * kRows;
    groups_in_step<F, Src, T, S>(a, rows, kRows);
  }
  for (int64_t r = r0 + S * per * kRows; r < r1; r += kRows)
    groups_in_step<F, Src, T, 1>(a, &r, int(std::min<int64_t>(kRows, r1 - r)));
}

// one_pass in the a.streams streams (panels of a 32-element type:
// matmul_prefetch_plan.cpp's has_streams_choice).
template <class F, class Src, int T>
void one_pass_streams(const KernelArgs& a, int64_t r0, int64_t r1) {
  if constexpr (std::is_same_v<Src, PanelGroup> && !std::is_same_v<typename F::Panel, PanelK>)
    if (a.streams == 2) return one_pass<F, Src, T, 2>(a, r0, r1);
  one_pass<F, Src, T>(a, r0, r1);
}

// one_pass for a.n_tokens (T..kPanelOnePassTokens), with the activation
// loads a.activations and the codes a.kquant_codes name where F has that
// choice.
template <class F, class Src, int T = 1>
void one_pass_of(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens == T) {
    if constexpr (T >= 2 && requires { typename F::Broadcasting; })
      if (a.activations == ActivationLoads::kBroadcast)
        return one_pass_streams<typename F::Broadcasting, Src, T>(a, r0, r1);
    if constexpr (std::is_same_v<Src, PanelGroup> && requires { typename F::InPlace; })
      if (a.kquant_codes == KQuantCodes::kInPlace) return one_pass_streams<typename F::InPlace, Src, T>(a, r0, r1);
    return one_pass_streams<F, Src, T>(a, r0, r1);
  }
  if constexpr (T < kPanelOnePassTokens) one_pass_of<F, Src, T + 1>(a, r0, r1);
}

// A batch of T tokens (kGemmMinTokens <= T < F::kTokens) with F's batch
// tile, one row group at a time.
template <class F, class Src, int T>
void batch_tile_rows(const KernelArgs& a, int64_t r0, int64_t r1) {
  const MatrixView& m = *a.w;
  const auto* x = static_cast<const uint8_t*>(a.x);
  const int64_t nb = F::panels(m.cols);
  for (int64_t r = r0; r < r1; r += kRows) {
    const int valid = int(std::min<int64_t>(kRows, r1 - r));
    __m512 acc[T];
    F::template small_batch_tile<T>(group<Src>(a, r, valid), nb, x, a.x_stride, acc);
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(a.y + t * m.rows + r, __mmask16((1u << valid) - 1), acc[t]);
  }
}
template <class F, class Src, int T = F::kTokens - 1>
void batch_tile(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens == T) return batch_tile_rows<F, Src, T>(a, r0, r1);
  if constexpr (T > kGemmMinTokens) batch_tile<F, Src, T - 1>(a, r0, r1);
}

// Row groups of 16 from r0 (a multiple of kRowAlign), tokens in chunks.
// Src: GatheredGroup (GGUF rows, 4+ tokens) or PanelGroup (Panels16, any
// count: 1-3 tokens, decode, take one_pass too, so a token's result is the
// same bits in every batch).
template <class F, class Src = GatheredGroup>
void gemm(const KernelArgs& a, int64_t r0, int64_t r1) {
  const MatrixView& m = *a.w;
  if (std::is_same_v<Src, GatheredGroup> && m.row_stride > size_t(INT_MAX) / kRows) {  // gather offsets are int32
    Kernel lower = avx2_kernel(m.type);
    (lower ? lower : avx2_kquant_kernel(m.type))(a, r0, r1);
    return;
  }
  if constexpr (!F::kSmallBatchTile) {
    if (a.n_tokens <= kPanelOnePassTokens) return one_pass_of<F, Src>(a, r0, r1);
  }
  // Batched decode (fewer tokens than a full tile): a kernel whose one tile
  // takes any such count (AMX: tile rows = tokens) does all of them in one
  // pass per row group, so each unpacked panel is used once for every token.
  if constexpr (F::kSmallBatchTile) {
    if (a.n_tokens >= kGemmMinTokens && a.n_tokens < F::kTokens) {
      [[maybe_unused]] const typename F::Session session(a.n_tokens);  // AMX: tile configuration for this thread
      return batch_tile<F, Src>(a, r0, r1);
    }
  }
  const int64_t nb = F::panels(m.cols);
  thread_local std::vector<typename F::Panel> panel;
  panel.resize(size_t(F::kPairTokens > 0 ? 2 * nb : nb));  // pair tiles: two row groups' panels
  [[maybe_unused]] const typename F::Session session(a.n_tokens);  // AMX: tile configuration for this thread
  const int64_t chunk = std::max<int64_t>(F::kTokens, int64_t(kChunkActBytes / a.x_stride) / F::kTokens * F::kTokens);
  for (int64_t t0 = 0; t0 < a.n_tokens; t0 += chunk) {
    const int64_t t1 = std::min(a.n_tokens, t0 + chunk);
    for (int64_t r = r0; r < r1; r += kRows) {
      const int valid = int(std::min<int64_t>(kRows, r1 - r));
      F::unpack(group<Src>(a, r, valid), m.cols, panel.data());
      if constexpr (F::kPairTokens > 0) {
        if (r + kRows < r1) {  // two row groups: pair tiles
          const int valid2 = int(std::min<int64_t>(kRows, r1 - r - kRows));
          F::unpack(group<Src>(a, r + kRows, valid2), m.cols, panel.data() + nb);
          const int64_t t_pairs = t1 - (t1 - t0) % F::kPairTokens;
          pair_tiles<F>(panel.data(), nb, a, r, valid2, t0, t_pairs);
          token_tiles<F>(panel.data(), nb, a, r, valid, t_pairs, t1);
          token_tiles<F>(panel.data() + nb, nb, a, r + kRows, valid2, t_pairs, t1);
          r += kRows;
          continue;
        }
      }
      token_tiles<F>(panel.data(), nb, a, r, valid, t0, t1);
    }
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl

#undef SHARDLM_GEMM_INLINE
