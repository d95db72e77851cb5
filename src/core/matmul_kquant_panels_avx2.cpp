// AVX2 kernels on Panels16 matrices of Q2_K to Q6_K (matmul_panels.cpp's
// layout: piece o of a super-block, the dword at its byte o, for the 16 rows
// side by side at 16 · o; Q3_K's and Q6_K's f16 scale, the 2-byte piece at
// its end, likewise). Half h of a panel is rows 8h .. 8h + 7: each piece is then one
// 32-byte load whose dword lanes are the 8 rows, as in the K-quant row-group
// tiles (matmul_kquants_avx2_rowgroups.h), whose integer sums and f32
// finishing these reproduce, so a token's result has the same bits alone
// or in batched decode (1-8 tokens: one pass over each panel here, in chunks
// of tokens) and in prefill (9+ tokens: the panels are interleaved into the
// tiles' KRowGroup).
//
// What a pass does per super-block and half, besides the codes: the rows'
// sub-block scales and mins are unpacked for all 8 rows at once in dword
// lanes (Q4_K's 12-byte fields are three pieces; one shuffle then spreads a
// sub-block's scale to its row's two int16 lanes for madd), where decoding
// GGUF rows one at a time unpacked them per row and folded every row's sum
// horizontally per super-block.
#include <bit>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/matmul_avx2_common.h"
#include "core/matmul_avx2_rowgroup_driver.h"
#include "core/matmul_kernels.h"
#include "core/matmul_kquants_avx2_rowgroups.h"
#include "core/matmul_kquants_decode.h"
#include "core/matmul_panel_prefetch.h"
#include "core/matmul_panels_avx2.h"
#include "core/unrolled.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

// pshufb indices (the same in both 128-bit lanes) taking byte `a` and byte
// `b` of each dword to its two int16 lanes, as their low byte (the high one
// zero) or, with `high`, as their high byte (the low one zero).
struct alignas(32) WordPick {
  int8_t idx[32];
};
constexpr WordPick word_pick(int a, int b, bool high) {
  WordPick w{};
  for (int i = 0; i < 32; ++i) {
    const int m = i % 16 / 4, k = i % 4;  // dword m of the lane, byte k of it
    const bool value_byte = high ? k % 2 == 1 : k % 2 == 0;
    w.idx[i] = value_byte ? int8_t(4 * m + (k < 2 ? a : b)) : int8_t(-128);
  }
  return w;
}
// Byte k of each dword in both of its int16 lanes; bytes k, k + 1 in one each.
constexpr WordPick kLowByte[4] = {word_pick(0, 0, false), word_pick(1, 1, false), word_pick(2, 2, false),
                                  word_pick(3, 3, false)};
constexpr WordPick kLowPair[2] = {word_pick(0, 1, false), word_pick(2, 3, false)};
constexpr WordPick kHighByte[4] = {word_pick(0, 0, true), word_pick(1, 1, true), word_pick(2, 2, true),
                                   word_pick(3, 3, true)};
constexpr WordPick kHighPair[2] = {word_pick(0, 1, true), word_pick(2, 3, true)};
inline __m256i pick(__m256i v, const WordPick& w) {
  return _mm256_shuffle_epi8(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(w.idx)));
}
// Signed byte scales (Q3_K's unpacked, Q6_K's): sub-block s's (byte s % 4 of
// its piece), sign-extended, in both int16 lanes of its row's dword; and
// sub-blocks 2p, 2p + 1's in int16 lanes 2i, 2i + 1.
inline __m256i signed_scale(__m256i piece, int s) { return _mm256_srai_epi16(pick(piece, kHighByte[s % 4]), 8); }
inline __m256i signed_scale_pair(__m256i piece, int p) {
  return _mm256_srai_epi16(pick(piece, kHighPair[p % 2]), 8);
}
// The 4-byte pieces of a half's scales from GGUF byte `at` on, each loaded
// where a sub-block needs it rather than held in a register through the
// super-block (Q2_K's and Q6_K's sixteen scales a row: four registers a half).
struct ScalePieces {
  const uint8_t* block;
  int h;
  size_t at;
  __m256i operator[](int m) const { return panel_piece(block, h, at + 4 * size_t(m)); }
};

// Q4_K and Q5_K: the 8 rows' 6-bit scales and mins (get_scale_min_k4's bit
// layout, k4_scales_mins) one byte per sub-block in dword lanes; the codes'
// nibbles, and Q5_K's fifth bit from qh.
template <class Rows>
struct Q45KPanel {
  using K = Rows;
  using Block = typename K::Block;
  static constexpr bool kQ5 = std::is_same_v<Block, block_q5_K>;
  // Both halves in one super_block pass at 1 token: Q4_K ~1.4x in cache
  // against a half at a time; Q5_K (and Q6_K) 5-10 % slower, their codes'
  // temporaries spilling.
  static constexpr bool kBothHalves = !kQ5;
  static constexpr bool kReloadShared = !kQ5;  // see Q6KPanel
  static constexpr bool kReloadActivations = kQ5;  // see super_block
  static constexpr size_t kBlockBytes = kPanelRows * sizeof(Block);
  struct Fields {
    __m256i sc_lo, sc_hi, mn_lo, mn_hi;  // byte k: sub-block k (lo) or 4 + k (hi)
    __m256 d, dmin;
  };
  static Fields fields(const uint8_t* block, int h) {
    const __m256i w0 = panel_piece(block, h, 4), w1 = panel_piece(block, h, 8), w2 = panel_piece(block, h, 12);
    const __m256i m6 = _mm256_set1_epi8(0x3f), m4 = _mm256_set1_epi8(0x0f), top2 = _mm256_set1_epi8(0x30);
    Fields f;
    f.sc_lo = _mm256_and_si256(w0, m6);
    f.mn_lo = _mm256_and_si256(w1, m6);
    f.sc_hi = _mm256_or_si256(_mm256_and_si256(w2, m4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), top2));
    f.mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4), _mm256_and_si256(_mm256_srli_epi32(w1, 2), top2));
    const F16Pairs d_dmin = panel_f16_pairs(block, h, 0);
    f.d = d_dmin.first;
    f.dmin = d_dmin.second;
    return f;
  }
  // Sub-block s's scale of each row in both int16 lanes of its dword (KRowGroup::scales[s]).
  static __m256i scale(const Fields& f, int s) {
    return pick(s < 4 ? f.sc_lo : f.sc_hi, kLowByte[s % 4]);
  }
  // Mins of sub-blocks 2p and 2p + 1 in int16 lanes 2i and 2i + 1 (KRowGroup::bias[p]).
  static __m256i min_pair(const Fields& f, int p) {
    return pick(p < 2 ? f.mn_lo : f.mn_hi, kLowPair[p % 2]);
  }
  // Elements 32j + 4v .. 32j + 4v + 3 of each row (Q4KRows::chunk,
  // Q5KRows::chunk: bit j of qh byte 4v + e is element 32j + 4v + e's fifth).
  static __m256i codes(const uint8_t* block, int h, int j, int v) {
    const __m256i raw = panel_piece(block, h, offsetof(Block, qs) + 32 * (j / 2) + 4 * v);
    const __m256i low = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0F));
    if constexpr (kQ5) {
      return or_high_bits<1>(low, panel_piece(block, h, offsetof(Block, qh) + 4 * v), j);
    } else {
      return low;
    }
  }
};

// Q6_K: sixteen int8 scales a row (four pieces), codes + 32 from a nibble of
// ql and two bits of qh (Q6KRows::chunk).
struct Q6KPanel {
  using K = Q6KRows;
  static constexpr bool kBothHalves = true;
  // A qh piece serves four chunks, a ql piece two. Left to see that, GCC
  // kept them from chunk to chunk, 16 registers' worth with both halves,
  // and spilled them and the sums (two stores a code vector). Loaded again
  // per chunk (L1 hits), on the Zen 3 (AVX2 only) a one-token 4096² pass in
  // cache took 630 us against 690, 128256 × 2048 streamed at 19.5-19.7 GB/s
  // against 18.0-18.5 (Q4_K, whose qs pieces serve two chunks: 22.2-22.4
  // against 21.1-21.4; Q5_K, one half at a time, 15.0-15.3 against 16.4;
  // Q2_K, Q3_K within 3 %: docs/BENCHMARKS.md, forty-ninth session).
  static constexpr bool kReloadShared = true;
  static constexpr bool kReloadActivations = false;  // see super_block
  static constexpr size_t kBlockBytes = kPanelRows * sizeof(block_q6_K);
  struct Fields {
    ScalePieces sc;  // byte k of piece m: scale 4m + k
    __m256 d;
  };
  static Fields fields(const uint8_t* block, int h) {
    return {{block, h, offsetof(block_q6_K, scales)}, panel_halves(block, h, offsetof(block_q6_K, d))};
  }
  static __m256i scale(const Fields& f, int s) { return signed_scale(f.sc[s / 4], s); }
  static __m256i codes(const uint8_t* block, int h, int j, int v) {
    const int half = j / 4, quarter = j % 4;
    const __m256i ql = panel_piece(block, h, offsetof(block_q6_K, ql) + 64 * half + 32 * (quarter & 1) + 4 * v);
    const __m256i qh = panel_piece(block, h, offsetof(block_q6_K, qh) + 32 * half + 4 * v);
    const __m256i low = _mm256_and_si256(quarter < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
    return or_high_bits<2>(low, qh, 2 * quarter);
  }
};

// Q2_K: sixteen bytes a row (four pieces), each a 4-bit scale under a
// 4-bit min, and 2-bit codes (Q2KRows::chunk).
struct Q2KPanel {
  using K = Q2KRows;
  static constexpr bool kBothHalves = true;
  static constexpr bool kReloadShared = false;  // see Q6KPanel
  static constexpr bool kReloadActivations = false;  // see super_block
  static constexpr size_t kBlockBytes = kPanelRows * sizeof(block_q2_K);
  struct Fields {
    ScalePieces sc;  // byte k of piece m: scale and min 4m + k
    __m256 d, dmin;
  };
  static Fields fields(const uint8_t* block, int h) {
    const F16Pairs d_dmin = panel_f16_pairs(block, h, offsetof(block_q2_K, d));
    return {{block, h, offsetof(block_q2_K, scales)}, d_dmin.first, d_dmin.second};
  }
  static __m256i scale(const Fields& f, int s) {
    return _mm256_and_si256(pick(f.sc[s / 4], kLowByte[s % 4]), _mm256_set1_epi16(15));
  }
  static __m256i min_pair(const Fields& f, int p) { return _mm256_srli_epi16(pick(f.sc[p / 2], kLowPair[p % 2]), 4); }
  static __m256i codes(const uint8_t* block, int h, int j, int v) {
    return two_bits_of(panel_piece(block, h, offsetof(block_q2_K, qs) + 32 * (j / 4) + 4 * v), j % 4);
  }
};

// Q3_K: sixteen 6-bit signed scales in 12 bytes a row (three pieces; as
// q3_k_scales16 per dword), codes + 4 from two bits of qs and one of hmask.
struct Q3KPanel {
  using K = Q3KRows;
  static constexpr bool kBothHalves = true;
  static constexpr bool kReloadShared = false;  // see Q6KPanel
  static constexpr bool kReloadActivations = false;  // see super_block
  static constexpr size_t kBlockBytes = kPanelRows * sizeof(block_q3_K);
  struct Fields {
    __m256i sc[4];  // byte k of dword m: scale 4m + k, as a signed byte
    __m256 d;
  };
  static Fields fields(const uint8_t* block, int h) {
    const size_t at = offsetof(block_q3_K, scales);
    const __m256i w[3] = {panel_piece(block, h, at), panel_piece(block, h, at + 4), panel_piece(block, h, at + 8)};
    const __m256i low = _mm256_set1_epi8(0x0F), high = _mm256_set1_epi8(0x30);
    const __m256i top[4] = {_mm256_slli_epi32(w[2], 4), _mm256_slli_epi32(w[2], 2), w[2], _mm256_srli_epi32(w[2], 2)};
    Fields f;
    for (int m = 0; m < 4; ++m) {
      const __m256i nibble = m < 2 ? w[m] : _mm256_srli_epi32(w[m - 2], 4);
      const __m256i six = _mm256_or_si256(_mm256_and_si256(nibble, low), _mm256_and_si256(top[m], high));
      f.sc[m] = _mm256_sub_epi8(six, _mm256_set1_epi8(32));
    }
    f.d = panel_halves(block, h, offsetof(block_q3_K, d));
    return f;
  }
  static __m256i scale(const Fields& f, int s) { return signed_scale(f.sc[s / 4], s); }
  static __m256i scale_pair(const Fields& f, int p) { return signed_scale_pair(f.sc[p / 2], p); }
  static __m256i codes(const uint8_t* block, int h, int j, int v) {
    const __m256i low = two_bits_of(panel_piece(block, h, offsetof(block_q3_K, qs) + 32 * (j / 4) + 4 * v), j % 4);
    return or_bit_at2(low, panel_piece(block, h, offsetof(block_q3_K, hmask) + 4 * v), j);
  }
};

// One super-block of halves h0 .. h0 + H - 1 (8 rows each) × T tokens: the
// exact integer sums of the row group tile (tile_k), its f32 finishing
// (add_super_block). With H = 2 each activation broadcast serves both
// halves; run for one half at a time, GCC keeps the first half's broadcasts
// for the second on the stack (a store and a reloading maddubs each).
// step(i) runs before code vector i = 8·j + v (v of 32-element chunk j):
// prefetches spread over the super-block. `step` is taken by value, which
// keeps what it reads in registers (matmul_panel_prefetch.h).
//
// Codes stored + offset: where the products of a sub-block could overflow
// int16 lanes (Q6_K: after two vectors; kOffsetRuns), the lanes sum all of
// them anyway, wrapping, and the run's offset term (`offsets`, offset_runs)
// brings them back to Σ (code − offset) · a, which fits (|code − offset| ≤
// 32, |a| ≤ 127, 8 products a lane): one madd a sub-block and token instead
// of two, and no offset madds a token at the end of the super-block. The
// integer sums, and every bit after them, are the same. Q3_K's sub-blocks
// fit one run already: it subtracts the offset term at the end, from bsums
// (with offset_runs its 8-token panels ran 13 % slower in cache, its 3-4
// no faster).
template <class K>
constexpr bool kOffsetRuns = K::kSignedCodes && K::kSum16 < K::kSubElems / 4;
template <class P, int T, int H, class Step>
inline void super_block(const uint8_t* block, int h0, const block_q8_K* const* x, const int32_t* const* offsets,
                        __m256 (*acc)[T], Step step) {
  using K = typename P::K;
  constexpr int kSubVectors = K::kSubElems / 4, S = kOffsetRuns<K> ? kSubVectors : K::kSum16;
  typename P::Fields f[H];
  for (int h = 0; h < H; ++h) f[h] = P::fields(block, h0 + h);
  __m256i isum[H][T];
  for (auto& half : isum)
    for (auto& v : half) v = _mm256_setzero_si256();
  // With kReloadActivations the codes' activations are read through
  // pointers hidden from GCC: where a super-block's halves run one after the
  // other, it saw the same loads in both and kept the first half's
  // broadcasts for the second on the stack (at 4 tokens 256 of them, a
  // store and a reloading maddubs each). Only those: with the whole of
  // x[t] hidden, the f32 finishing compiled otherwise and the results lost
  // the prefill tiles' bits (MatmulPanels.EveryIsaMatchesReference).
  const int8_t* token_codes[T];
  for (int t = 0; t < T; ++t) {
    token_codes[t] = x[t]->qs;
    if constexpr (P::kReloadActivations) asm volatile("" : "+r"(token_codes[t]));
  }
  // Unrolled with compile-time j and v: GCC kept a loop over j here, with the
  // scales and shifts picked at run time and its counters on the stack.
  unrolled<8>([&](auto j) SHARDLM_ALWAYS_INLINE {
    // Hidden from GCC with kReloadShared: the chunk's pieces are loaded
    // again rather than kept from an earlier chunk that read them.
    const uint8_t* chunk_block = block;
    if constexpr (P::kReloadShared) asm volatile("" : "+r"(chunk_block));
    __m256i s16[H][T];
    unrolled<8>([&](auto v) SHARDLM_ALWAYS_INLINE {
      step(8 * int(j) + int(v));
      __m256i q[H];
      for (int h = 0; h < H; ++h) q[h] = P::codes(chunk_block, h0 + h, j, v);  // unsigned (Q6_K: code + 32)
      for (int t = 0; t < T; ++t) {
        int32_t a4;
        std::memcpy(&a4, token_codes[t] + 32 * j + 4 * v, 4);
        const __m256i act = _mm256_set1_epi32(a4);
        for (int h = 0; h < H; ++h) {
          const __m256i prod = _mm256_maddubs_epi16(q[h], act);
          s16[h][t] = v % S == 0 ? prod : in_order(_mm256_add_epi16(s16[h][t], prod));
        }
      }
      if constexpr (v % S == S - 1) {
        constexpr int sub = (32 * j + 4 * v) / K::kSubElems;
        for (int h = 0; h < H; ++h) {
          const __m256i sc = P::scale(f[h], sub);
          for (int t = 0; t < T; ++t) {
            __m256i run = s16[h][t];
            if constexpr (kOffsetRuns<K>) run = _mm256_add_epi16(run, _mm256_set1_epi32(offsets[t][sub]));
            isum[h][t] = in_order(_mm256_add_epi32(isum[h][t], _mm256_madd_epi16(run, sc)));
          }
        }
      }
    });
  });
  static_assert(kSubVectors % S == 0, "an int16 run must not cross a sub-block");
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      __m256i bsum = _mm256_setzero_si256();
      if constexpr (K::kSignedCodes) {
        if constexpr (!kOffsetRuns<K>) {
          // Codes were taken + offset: subtract offset · Σ scale · (activation
          // sum of its 16 codes).
          __m256i offset = _mm256_setzero_si256();
          for (int p = 0; p < 8; ++p) {
            int32_t pair;
            std::memcpy(&pair, x[t]->bsums + 2 * p, 4);
            offset = _mm256_add_epi32(offset, _mm256_madd_epi16(P::scale_pair(f[h], p), _mm256_set1_epi32(pair)));
          }
          constexpr int kOffsetShift = std::countr_zero(unsigned(K::kCodeOffset));
          static_assert(K::kCodeOffset == 1 << kOffsetShift);
          isum[h][t] = _mm256_sub_epi32(isum[h][t], _mm256_slli_epi32(offset, kOffsetShift));
        }
        acc[h][t] = add_super_block<K>(acc[h][t], x[t]->d, f[h].d, f[h].d, isum[h][t], bsum);
      } else {
        // Mins weigh the activation sums of their sub-block's codes: Q2_K's
        // are the bsums, Q4_K's and Q5_K's neighbouring bsums added
        // (TileTokenBlock::sub_sums).
        alignas(16) int32_t pairs[kSub<K> / 2];
        const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[t]->bsums));
        const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[t]->bsums + 8));
        if constexpr (K::kSubElems == 16) {
          _mm_store_si128(reinterpret_cast<__m128i*>(pairs), lo);
          _mm_store_si128(reinterpret_cast<__m128i*>(pairs + 4), hi);
        } else {
          _mm_store_si128(reinterpret_cast<__m128i*>(pairs), _mm_hadd_epi16(lo, hi));
        }
        for (int p = 0; p < kSub<K> / 2; ++p)
          bsum = _mm256_add_epi32(bsum, _mm256_madd_epi16(P::min_pair(f[h], p), _mm256_set1_epi32(pairs[p])));
        acc[h][t] = add_super_block<K>(acc[h][t], x[t]->d, f[h].d, f[h].dmin, isum[h][t], bsum);
      }
    }
  }
}

// Dword s of super-block b's 16 (at out + 16 · b) for kOffsetRuns types:
// −offset times the activations that a sub-block s run adds into the int16
// lanes of a row's dword (super_block), elements 16s + 4v + {0, 1} in the
// low lane and + {2, 3} in the high one, v = 0..3. Wrapping int16 sums: only
// their sum with the run matters, and that fits.
template <class K>
void offset_runs(const block_q8_K* x, int64_t nb, int32_t* out) {
  const __m256i ones = _mm256_set1_epi8(1);
  constexpr int kOffsetShift = std::countr_zero(unsigned(K::kCodeOffset));
  static_assert(K::kCodeOffset == 1 << kOffsetShift && K::kSubElems == 16);
  for (int64_t b = 0; b < nb; ++b)
    for (int c = 0; c < QK_K / 32; ++c) {
      const __m256i pairs = _mm256_maddubs_epi16(ones, load32(x[b].qs + 32 * c));  // a[2i] + a[2i + 1]
      __m256i sums = _mm256_add_epi16(pairs, _mm256_shuffle_epi32(pairs, 0x4E));
      sums = _mm256_add_epi16(sums, _mm256_shuffle_epi32(sums, 0xB1));  // every dword of a 128-bit lane
      sums = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sums, kOffsetShift));
      out[16 * b + 2 * c] = _mm256_extract_epi32(sums, 0);
      out[16 * b + 2 * c + 1] = _mm256_extract_epi32(sums, 4);
    }
}

// Token t's offset_runs among every token's (nb super-blocks each; null:
// none, not a kOffsetRuns type).
template <class K, class Int>
Int* runs_of_token(Int* runs, int64_t nb, int64_t t) {
  return runs ? runs + t * nb * kSub<K> : nullptr;
}

// Every token's offset_runs (kOffsetRuns types; else null). Per thread and
// reused, as prefill_row_groups' buffer.
template <class K>
const int32_t* token_offset_runs(const KernelArgs& a) {
  if constexpr (!kOffsetRuns<K>) {
    return nullptr;
  } else {
    const int64_t nb = a.w->cols / QK_K;
    thread_local std::vector<int32_t> runs;
    runs.resize(size_t(a.n_tokens * nb * kSub<K>));
    for (int64_t t = 0; t < a.n_tokens; ++t)
      offset_runs<K>(token_blocks_k(a, t), nb, runs_of_token<K>(runs.data(), nb, t));
    return runs.data();
  }
}

// Rows [r0, r1) (whole panels) × T tokens, each panel read once; kSpread:
// the plan spreads a super-block's prefetches over its code vectors; runs:
// token_offset_runs from this call's first token.
template <class P, int T, bool kSpread>
void panel_rows(const KernelArgs& a, int64_t r0, int64_t r1, const int32_t* runs) {
  const MatrixView& m = *a.w;
  const int64_t nb = m.cols / QK_K;
  const block_q8_K* x0[T];
  for (int t = 0; t < T; ++t) x0[t] = token_blocks_k(a, t);
  const PanelPrefetch prefetch(P::kBlockBytes, a.prefetch, a.prefetch_ahead);
  for (int64_t r = r0; r < r1; r += kPanelRows) {
    const uint8_t* panel = m.row(r);
    __m256 acc[2][T];
    for (auto& half : acc)
      for (auto& v : half) v = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = panel + size_t(b) * P::kBlockBytes;
      if constexpr (!kSpread) prefetch.ahead_of(block, P::kBlockBytes);
      const block_q8_K* x[T];
      const int32_t* offsets[T];
      for (int t = 0; t < T; ++t) {
        x[t] = x0[t] + b;
        const int32_t* token_runs = runs_of_token<typename P::K>(runs, nb, t);
        offsets[t] = token_runs ? token_runs + b * kSub<typename P::K> : nullptr;
      }
      // A spread plan's prefetches a part per code vector (64 of them, 128
      // when the super-block's halves run one after the other), its lines
      // constants. Not held in place with keep_prefetch_in_place (as the
      // AVX-512 kernels do): under ISA=avx2 on the AMX Xeon that ran 1B
      // Q4_K_M decode 2-5 % faster, but on the Zen 3, an AVX2-only CPU
      // that runs this kernel natively, the barrier spilled Q6_K's sums at
      // one token: 4096² in cache 928 us against 690 without, 128256 × 2048
      // streamed at 14.0 against 18.0 GB/s; Q3_K 9 % slower, Q2_K, Q4_K and
      // Q5_K alike (docs/BENCHMARKS.md, forty-ninth session).
      const auto part = [prefetch, block](int i, int parts) SHARDLM_ALWAYS_INLINE {
        if constexpr (kSpread) prefetch.part_ahead_of(block, i, parts, P::kBlockBytes);
      };
      if constexpr (T == 1 && P::kBothHalves) {
        super_block<P, T, 2>(block, 0, x, offsets, acc, [part](int i) SHARDLM_ALWAYS_INLINE { part(i, 64); });
      } else {
        super_block<P, T, 1>(block, 0, x, offsets, acc, [part](int i) SHARDLM_ALWAYS_INLINE { part(i, 128); });
        super_block<P, T, 1>(block, 1, x, offsets, acc + 1,
                             [part](int i) SHARDLM_ALWAYS_INLINE { part(64 + i, 128); });
      }
    }
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < T; ++t) _mm256_storeu_ps(a.y + t * m.rows + r + 8 * h, acc[h][t]);
  }
}
template <class P, int T>
void panel_rows(const KernelArgs& a, int64_t r0, int64_t r1, const int32_t* runs) {
  if (plan_spreads(a.prefetch)) return panel_rows<P, T, true>(a, r0, r1, runs);
  panel_rows<P, T, false>(a, r0, r1, runs);
}

// Rows [rb, rend) as KRowGroups (interleave_k's, from panels).
template <class P>
void interleave_panels_k(const MatrixView& m, int64_t rb, int64_t rend, int64_t nb, KRowGroup<typename P::K>* out) {
  using K = typename P::K;
  for (int64_t r = rb, g = 0; r < rend; r += kPGroupRows, ++g) {
    const uint8_t* panel = m.row(r / kPanelRows * kPanelRows);
    const int h = int(r % kPanelRows) / kPGroupRows;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = panel + size_t(b) * P::kBlockBytes;
      KRowGroup<K>& dst = out[g * nb + b];
      const typename P::Fields f = P::fields(block, h);
      for (int s = 0; s < kSub<K>; ++s) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.scales[s]), P::scale(f, s));
      _mm256_storeu_ps(dst.d, f.d);
      __m256i shift = _mm256_setzero_si256();
      if constexpr (K::kSignedCodes) {
        _mm256_storeu_ps(dst.dmin, _mm256_setzero_ps());
      } else {
        _mm256_storeu_ps(dst.dmin, f.dmin);
        for (int p = 0; p < kSub<K> / 2; ++p)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.bias[p]), P::min_pair(f, p));
      }
      for (int j = 0; j < 8; ++j)
        for (int v = 0; v < 8; ++v) {
          __m256i q = P::codes(block, h, j, v);
          if constexpr (K::kSignedCodes) {
            // shift_term: −128 · Σ scale · Σ (code − offset) over each sub-block (interleave_k).
            q = _mm256_sub_epi8(q, _mm256_set1_epi8(K::kCodeOffset));
            const __m256i code_sums =
                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
            const __m256i sc = _mm256_srai_epi32(P::scale(f, (32 * j + 4 * v) / K::kSubElems), 16);
            shift = _mm256_sub_epi32(shift, _mm256_slli_epi32(_mm256_mullo_epi32(sc, code_sums), 7));
          }
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.codes[j][v]), q);
        }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.shift_term), shift);
    }
  }
}

// 1..kPanelChunkTokens tokens.
template <class P>
void panel_rows_of(const KernelArgs& a, int64_t r0, int64_t r1, const int32_t* runs) {
  switch (a.n_tokens) {
    case 1: return panel_rows<P, 1>(a, r0, r1, runs);
    case 2: return panel_rows<P, 2>(a, r0, r1, runs);
    case 3: return panel_rows<P, 3>(a, r0, r1, runs);
    default: return panel_rows<P, kPanelChunkTokens>(a, r0, r1, runs);
  }
}

template <class P>
void kquant_panels(const KernelArgs& a, int64_t r0, int64_t r1) {
  using K = typename P::K;
  if (a.n_tokens <= kPanelOnePassTokens) {
    const int32_t* runs = token_offset_runs<K>(a);
    if (a.n_tokens <= kPanelChunkTokens) return panel_rows_of<P>(a, r0, r1, runs);
    return panel_token_chunks(a, r0, r1, [runs, &a](const KernelArgs& chunk, int64_t c0, int64_t c1, int64_t t) {
      panel_rows_of<P>(chunk, c0, c1, runs_of_token<K>(runs, a.w->cols / QK_K, t));
    });
  }
  return prefill_row_groups<KRowGroup<K>, TileTokenBlock>(a, r0, r1, a.w->cols / QK_K, interleave_panels_k<P>,
                                                          tile_k<K>, tile_token_blocks<K>);
}

}  // namespace

Kernel avx2_kquant_panel_kernel(DType type) {
  switch (type) {
    case DType::Q2_K: return kquant_panels<Q2KPanel>;
    case DType::Q3_K: return kquant_panels<Q3KPanel>;
    case DType::Q4_K: return kquant_panels<Q45KPanel<Q4KRows>>;
    case DType::Q5_K: return kquant_panels<Q45KPanel<Q5KRows>>;
    case DType::Q6_K: return kquant_panels<Q6KPanel>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl
