// The 32-element block types of the prefill / batched-decode kernels
// (matmul_gemm.h): Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 unpacked into panels and
// multiplied with vpdpbusd. Only include from files compiled with AVX-512
// VNNI flags (see matmul_gemm.h).
#pragma once

#include "core/matmul_gemm_common.h"

namespace shardlm::matmul_impl {
namespace {

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

// The 4-bit types name where their nibbles start (kNibbles) and unpack
// their scales apart, for Blocks32::block_in_place.
struct Q4_0P {
  using Block = block_q4_0;
  static constexpr bool kMinimum = false;
  static constexpr int kOffsetShift = 0;  // offset 8 << kOffsetShift
  static constexpr size_t kNibbles = 2;
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack_scales(const G& g, Panel32& p) {
    p.scale = g.half(0);
  }
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack(const G& g, Panel32& p) {
    unpack_scales(g, p);
    unpack_nibbles(g, kNibbles, p);
  }
};
// The minimum types' f16 scale and minimum, the block's first dword.
template <class G>
SHARDLM_GEMM_INLINE void unpack_scale_minimum(const G& g, Panel32& p) {
  const __m512i dm = g.at(0);
  p.scale = f16_low(dm);
  p.bias = f16_high(dm);
}
struct Q4_1P {
  using Block = block_q4_1;
  static constexpr bool kMinimum = true;
  static constexpr size_t kNibbles = 4;
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack_scales(const G& g, Panel32& p) {
    unpack_scale_minimum(g, p);
  }
  template <class G>
  SHARDLM_GEMM_INLINE static void unpack(const G& g, Panel32& p) {
    unpack_scales(g, p);
    unpack_nibbles(g, kNibbles, p);
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
    unpack_scale_minimum(g, p);
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
  // Block b of a Panels16 group, its size and odd piece constants.
  SHARDLM_GEMM_INLINE static PanelBlock panel_block(const PanelGroup& src, int64_t b) {
    return src.template block<kRows * sizeof(typename P::Block)>(b, panel_odd_piece(sizeof(typename P::Block), 32));
  }
  template <class Src>
  SHARDLM_GEMM_INLINE static void unpack_block(const Src& src, int64_t b, Panel32& out) {
    if constexpr (std::is_same_v<Src, PanelGroup>) {
      P::unpack(panel_block(src, b), out);
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

  // One token of a 4-bit type straight from its panel: each high nibble is
  // masked in place, 16 times its code, instead of shifted down, and
  // multiplied in a chain of its own whose sum is shifted down once a block
  // (exact: every product is a multiple of 16). Three vector uops fewer a
  // block on the two ports vpdpbusd takes; the block's integer sum, and so
  // every bit, are unchanged. On the AMX Xeon 4-5 % faster in L2 (Q4_0,
  // Q4_1), level from DRAM. 2-3 tokens keep block_tokens, whose activation
  // loads are timed per CPU.
  template <int T>
    requires(T == 1 && requires { P::kNibbles; })
  SHARDLM_GEMM_INLINE static void block_in_place(const PanelGroup& src, int64_t b, Panel32& p, const uint8_t* x,
                                                 size_t, __m512* acc) {
    const PanelBlock g = panel_block(src, b);
    P::unpack_scales(g, p);
    __m512i q[4];
    g.at4(P::kNibbles, q);
    const auto& xb = *reinterpret_cast<const block_q8_32*>(x + size_t(b) * sizeof(block_q8_32));
    __m512i low = sum_start(xb), high = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      low = _mm512_dpbusd_epi32(low, nibbles_low(q[h]), _mm512_set1_epi32(load_i32(xb.qs + 4 * h)));
      high = _mm512_dpbusd_epi32(high, _mm512_and_si512(q[h], _mm512_set1_epi32(int(0xF0F0F0F0))),
                                 _mm512_set1_epi32(load_i32(xb.qs + 16 + 4 * h)));
    }
    acc[0] = add_block(acc[0], _mm512_add_epi32(low, _mm512_srai_epi32(high, 4)), p, xb);
  }

  // acc[t] (16 rows of token t) += block b's products.
  template <int T>
  SHARDLM_GEMM_INLINE static void block(const Panel32& p, int64_t b, const uint8_t* x, size_t x_stride, __m512* acc) {
    __m512i w[8];
    for (int g = 0; g < 8; ++g) w[g] = _mm512_load_si512(&p.codes[g]);
    const uint8_t* xb = x + size_t(b) * sizeof(block_q8_32);
    // Up to 4 tokens at a time, two chains each: 8 chains, 8 code vectors,
    // the accumulators and the activation quads fit the 32 registers. The
    // batched decode of 5-8 tokens ran all of them at once, with one chain
    // a token from 7 (6 with two filled every register): on Zen 5 1B Q4_0's
    // matrices at 8 tokens from DRAM took 40-44 ms that way against 32-33
    // as 4 + 4, and 5-6 tokens 4-8 % less as 4 + the rest. Beyond 8 (the
    // prefill tiles' 16 accumulators) one chain a token.
    if constexpr (T <= 4) {
      block_tokens<T, 2>(w, p, xb, x_stride, acc);
    } else if constexpr (T <= 8) {
      block_tokens<4, 2>(w, p, xb, x_stride, acc);
      block_tokens<T - 4, 2>(w, p, xb + x_stride * 4, x_stride, acc + 4);
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

}  // namespace
}  // namespace shardlm::matmul_impl
