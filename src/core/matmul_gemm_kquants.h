// The K-quant block types of the prefill / batched-decode kernels
// (matmul_gemm.h): Q2_K to Q6_K super-blocks unpacked into panels, or their
// codes made where vpdpbusd takes them. Only include from files compiled with
// AVX-512 VNNI flags (see matmul_gemm.h).
#pragma once

#include "core/matmul_gemm_common.h"

namespace shardlm::matmul_impl {
namespace {

// ---- K-quants (256-element super-blocks) ------------------------------------
// Σ_sub (d·scale)·Σ(u·a) over sub-blocks of kSub elements with unsigned codes
// u, plus one integer term from the activations' 16-element sums (bsums):
// Q2_K/Q4_K/Q5_K subtract dmin·Σ min·bsum, Q3_K and Q6_K their offset (4,
// 32)·d·Σ scale·bsum.
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
// dwords); code_q45_k: code vector i (0..63), group i%8 of sub-block i/8,
// for codes made in place, where Q4_K's odd sub-blocks come as their high
// nibbles masked where they lie, 16 times the code (Q4_KP::kHighNibblesInPlace).
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
  const __m512i q = g.at(kQs + 32 * size_t(sub / 2) + 4 * size_t(gi));
  if (!kQ5) return sub % 2 ? _mm512_and_si512(q, _mm512_set1_epi32(int(0xF0F0F0F0))) : nibbles_low(q);
  return q45_k_codes<kQ5>(q, g.at(kQh + 4 * size_t(gi)), sub);
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

// Q2_K and Q3_K: element e = 128h + 32j + l has its low 2 bits at bits 2j
// of qs[32h + l] (qs from byte kQs of the block); Q3_K's third bit is bit
// 4h + j of hmask[l], set for code + 4 (codes u − 4, sixteen 6-bit signed
// scales). Q2_K's sixteen scale bytes hold a 4-bit scale (low nibble) and a
// 4-bit min (high nibble). Both have 16-element sub-blocks, one bsum each.
// low2_k_codes: the low bits of group gi of j (0..3) from a qs dword;
// code vector i: group i%8 of j = (i/8)%4 of half i/32.
SHARDLM_GEMM_INLINE __m512i low2_k_codes(__m512i q, int j) { return byte_bits_moved(q, 2 * j, 0, 0x03030303); }
// (low & 3) | the hmask bit moved to bit 2, per byte (0xEA: A·B + C).
SHARDLM_GEMM_INLINE __m512i q3_k_codes(__m512i q, __m512i hmask, int h, int j) {
  const int from = 4 * h + j;
  const __m512i moved = from < 2 ? _mm512_slli_epi32(hmask, unsigned(2 - from))
                        : from > 2 ? _mm512_srli_epi32(hmask, unsigned(from - 2))
                                   : hmask;
  return _mm512_ternarylogic_epi32(moved, _mm512_set1_epi32(0x04040404), low2_k_codes(q, j), 0xEA);
}
// Bytes i and i + 1 (i = 0 or 2) of each dword of v as the two int16 halves
// of that dword, zero-extended: a vpdpwssd factor for bsums[s], bsums[s + 1].
SHARDLM_GEMM_INLINE __m512i dword_bytes_as_words(__m512i v, int i) {
  const int32_t z = int32_t(0x80008000u | unsigned(i) | unsigned(i + 1) << 16);
  return _mm512_shuffle_epi8(v, _mm512_set4_epi32(z + 0x000C000C, z + 0x00080008, z + 0x00040004, z));
}
struct Q2_KP {
  using Block = block_q2_K;
  static constexpr int kSub = 16;
  static constexpr size_t kQs = 16;
  template <class G>
  SHARDLM_GEMM_INLINE static void scales(const G& g, PanelK& p) {
    const __m512i dd = g.at(80);
    const __m512 d = f16_low(dd);
    p.pair_scale = _mm512_sub_ps(_mm512_setzero_ps(), f16_high(dd));
    for (int w = 0; w < 4; ++w) {
      const __m512i v = g.at(4 * size_t(w));
      const __m512i scale = nibbles_low(v), min = nibbles_high(v);
      for (int k = 0; k < 4; ++k) p.sub_scale[4 * w + k] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(dword_byte(scale, k)));
      for (int k = 0; k < 4; k += 2) p.pair_factor[2 * w + k / 2] = dword_bytes_as_words(min, k);
    }
  }
  template <class G>
  static void unpack(const G& g, PanelK& p) {
    scales(g, p);
    for (int h = 0; h < 2; ++h) {
      __m512i q[8];
      for (int gi = 0; gi < 8; gi += 4) g.at4(kQs + 32 * size_t(h) + 4 * size_t(gi), &q[gi]);
      for (int gi = 0; gi < 8; ++gi)
        for (int j = 0; j < 4; ++j) p.codes[32 * h + 8 * j + gi] = low2_k_codes(q[gi], j);
    }
  }
  template <class G>
  SHARDLM_GEMM_INLINE static __m512i code(const G& g, int i) {
    return low2_k_codes(g.at(kQs + 32 * size_t(i / 32) + 4 * size_t(i % 8)), i / 8 % 4);
  }
};
struct Q3_KP {
  using Block = block_q3_K;
  static constexpr int kSub = 16;
  static constexpr size_t kQs = 32, kScales = 96;
  // Scale s is (low | high << 4) − 32: low the nibble s / 8 of scales byte
  // s % 8, high bits 2·(s / 4) of byte 8 + s % 4. Per dword of four
  // scales, both moved into place with one shift each.
  template <class G>
  SHARDLM_GEMM_INLINE static void scales(const G& g, PanelK& p) {
    const __m512 d = g.half(108);
    p.pair_scale = _mm512_mul_ps(d, _mm512_set1_ps(-4.0f));
    const __m512i w[3] = {g.at(kScales), g.at(kScales + 4), g.at(kScales + 8)};
    __m512i sc[16];
    for (int q = 0; q < 4; ++q) {
      const __m512i low = q < 2 ? w[q] : _mm512_srli_epi32(w[q - 2], 4);
      const __m512i six = nibble_or(low, byte_bits_moved(w[2], 2 * q, 4, 0x30303030));
      for (int k = 0; k < 4; ++k) sc[4 * q + k] = _mm512_sub_epi32(dword_byte(six, k), _mm512_set1_epi32(32));
    }
    for (int s = 0; s < 16; ++s) p.sub_scale[s] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc[s]));
    for (int q = 0; q < 8; ++q)
      p.pair_factor[q] = _mm512_or_si512(_mm512_and_si512(sc[2 * q], _mm512_set1_epi32(0xFFFF)),
                                         _mm512_slli_epi32(sc[2 * q + 1], 16));
  }
  template <class G>
  static void unpack(const G& g, PanelK& p) {
    scales(g, p);
    __m512i hmask[8];
    for (int gi = 0; gi < 8; gi += 4) g.at4(4 * size_t(gi), &hmask[gi]);
    for (int h = 0; h < 2; ++h) {
      __m512i q[8];
      for (int gi = 0; gi < 8; gi += 4) g.at4(kQs + 32 * size_t(h) + 4 * size_t(gi), &q[gi]);
      for (int gi = 0; gi < 8; ++gi)
        for (int j = 0; j < 4; ++j) p.codes[32 * h + 8 * j + gi] = q3_k_codes(q[gi], hmask[gi], h, j);
    }
  }
  template <class G>
  SHARDLM_GEMM_INLINE static __m512i code(const G& g, int i) {
    const int h = i / 32, gi = i % 8;
    return q3_k_codes(g.at(kQs + 32 * size_t(h) + 4 * size_t(gi)), g.at(4 * size_t(gi)), h, i / 8 % 4);
  }
};

// Q4_K's unpacking is forced inline (GCC left it a call that wrote the whole
// panel out: half of one_pass<1>'s time; inlined, 1 token 1.4x faster in
// cache). Q5_K's and Q6_K's measured no faster inlined and stay calls
// (docs/bench/dec5.md). `code` gives vector i where the dot products take
// it, for one_pass with the codes in place (KQuantCodes).
struct Q4_KP {
  using Block = block_q4_K;
  static constexpr int kSub = 32;
  // Made in place, an odd sub-block's codes are its high nibbles masked
  // where they lie, 16 times the code (one uop a vector, not a shift and a
  // mask; Q5_K's fifth bit would not fit): KQuant::block shifts those
  // sub-blocks' sums down, exactly, as every product is a multiple of 16.
  static constexpr bool kHighNibblesInPlace = true;
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
    const auto parts = src.template prefetch_parts<kRows * sizeof(typename P::Block)>(b);
    const auto prefetch_part = [parts](int i) SHARDLM_ALWAYS_INLINE {
      parts.part(i, kCodeVectors);
      if constexpr (T <= 4) keep_prefetch_in_place();
    };
    prefetch_part(0);
    P::scales(g, p);
    const auto before_code = [prefetch_part](int i) SHARDLM_ALWAYS_INLINE {
      if (i > 0) prefetch_part(i);
    };
    constexpr bool kHigh16 = requires { P::kHighNibblesInPlace; };
    block<T, true, kHigh16>(p, [&](int i) { return P::code(g, i); }, b, x, x_stride, acc, before_code);
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
  // super-block). kHigh16: codes(i) of the odd sub-blocks are 16 times the
  // codes (Q4_KP::kHighNibblesInPlace).
  template <int T, bool kUnroll, bool kHigh16 = false, class Codes, class BeforeCode>
  SHARDLM_GEMM_INLINE static void block(const PanelK& p, const Codes& codes, int64_t b, const uint8_t* x,
                                        size_t x_stride, __m512* acc, const BeforeCode& before_code) {
    constexpr int kGroups = P::kSub / 4, kSplit = T < 7 ? 2 : 1;
    constexpr bool kFresh = T < 4 || P::kSub == 16;
    // From 4 tokens the activations' broadcasts are embedded in the vpdpbusd
    // (no register, no uop of their own), and a 32-code sub-block's code
    // vectors are made (or loaded) where they are multiplied, one live at a
    // time rather than all 8: at 8 tokens the running sums, their starts,
    // the partial sums and 8 code vectors had taken all 32 registers and
    // spilled. On Zen 5, in cache (2048², thread's best of 31): Q4_K 8
    // tokens 132-140 → 117-128 µs, Q5_K 161-201 → 131-156; Q2_K, Q3_K and
    // Q6_K, with 4 code vectors a sub-block, gained from the broadcasts alone
    // (their codes at use measured slower for Q6_K at 8 tokens).
    constexpr bool kEmbedBroadcast = T >= 4, kCodeAtUse = T >= 4 && P::kSub == 32;
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
        const auto dot = [&](int g, __m512i w) SHARDLM_ALWAYS_INLINE {
          for (int t = 0; t < T; ++t) {
            __m512i& sum_t = sum[g % kSplit][t];
            const int8_t* at = a[t] + P::kSub * s + 4 * g;
            sum_t = kEmbedBroadcast ? dpbusd_broadcast(sum_t, w, at)
                                    : _mm512_dpbusd_epi32(sum_t, w, _mm512_set1_epi32(load_i32(at)));
          }
        };
        if constexpr (kCodeAtUse) {
          steps<kGroups, kUnroll>([&](auto g) SHARDLM_ALWAYS_INLINE {
            before_code(kGroups * s + g);
            dot(g, codes(kGroups * s + g));
          });
        } else {
          __m512i w[kGroups];
          steps<kGroups, kUnroll>([&](auto g) SHARDLM_ALWAYS_INLINE {
            before_code(kGroups * s + g);
            w[g] = codes(kGroups * s + g);
          });
          for (int g = 0; g < kGroups; ++g) dot(g, w[g]);
        }
        for (int t = 0; t < T; ++t) {
          const __m512i joined = kSplit == 2 ? _mm512_add_epi32(sum[0][t], sum[1][t]) : sum[0][t];
          __m512i isum = kFresh || k == 0 ? joined : _mm512_sub_epi32(joined, before[t]);
          if (!kFresh) before[t] = joined;
          if (kHigh16 && s % 2) isum = _mm512_srai_epi32(isum, 4);
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

}  // namespace
}  // namespace shardlm::matmul_impl
