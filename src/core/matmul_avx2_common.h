// Helpers shared by the AVX2 and AVX-512 kernel files (included only from
// *_avx2.cpp and *_avx512.cpp, which are compiled with at least -mavx2 -mfma
// -mf16c). Internal linkage: each file gets its own copy compiled with its own
// flags, so the linker can never hand an AVX-512 build of a helper to AVX2 code.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace shardlm::matmul_impl::avx2 {
namespace {

// Decode kernels prefetch this far ahead in a weight row, one cache line per
// 64 bytes consumed (the hardware prefetcher alone left a thread at ~65% of
// its read bandwidth).
constexpr int kPrefetchBytes = 2048;

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// 8 float weights at p widened to f32, and one of them (a row's tail): the
// float decode kernels' rows and the float tiles' columns (AVX2).
struct F32W {
  static constexpr size_t kBytes = 4;
  static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static float one(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
};
struct F16W {
  static constexpr size_t kBytes = 2;
  static __m256 load(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float one(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return half_to_float(h);
  }
};
struct BF16W {
  static constexpr size_t kBytes = 2;
  static __m256 load(const uint8_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static float one(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_f32(h);
  }
};

inline __m128 f16x4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
  return _mm_cvtph_ps(_mm_setr_epi16(short(a), short(b), short(c), short(d), 0, 0, 0, 0));
}

// 32 unsigned bytes `u` times 32 signed bytes `s`, summed in 8 int32 lanes of
// 4 adjacent products each (no overflow while |u·s| ≤ 255·127·2 per pair).
inline __m256i dot_u8_s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Like dot_u8_s8, but the 16 pairs of each 128-bit half are weighted by one
// int16 scale per half: lanes 0-3 cover elements 0-15 (scale `lo`), 4-7 the rest.
inline __m256i dot_u8_s8_scaled(__m256i u, __m256i s, int lo, int hi) {
  const __m256i scales = _mm256_setr_m128i(_mm_set1_epi16(int16_t(lo)), _mm_set1_epi16(int16_t(hi)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scales);
}

// Byte i of the result is 0xFF when bit i of `bits` is set.
inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);  // byte i: all bits but i % 8
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

// acc + vpdpbusd(u, s) (unsigned by signed bytes, four products a dword) in
// its VEX form, AVX-VNNI, on ymm. Written out: the AVX2 files are built for
// every AVX2 CPU, and only kernels chosen where avx_vnni_active() run it.
inline __m256i dpbusd_vex(__m256i acc, __m256i u, __m256i s) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
  return acc;
}

// v, unseen by the optimiser: a running int16/int32 sum passed through this
// after each add stays a chain. Otherwise GCC reassociates the adds of a
// tile into a tree, which holds every product of the tile at once: they
// spill to the stack, a store and a load for each maddubs.
inline __m256i in_order(__m256i v) {
  asm("" : "+x"(v));
  return v;
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 packed bytes → 32 nibbles: low nibbles are elements 0-15, high 16-31.
// The 16 bytes go to both halves in the load itself; shifting the upper
// half's 64-bit words by 4 brings each byte's high nibble down (what shifts
// in from the next byte is masked off). One uop fewer than shift + insert.
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// 8 vectors of 8 dwords, transposed: out[v] dword i = in[i] dword v.
inline void transpose8x8_dwords(const __m256i in[8], __m256i out[8]) {
  __m256i t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_epi32(in[2 * k], in[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_epi32(in[2 * k], in[2 * k + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
    out[4 + k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl::avx2
