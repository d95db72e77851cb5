// What the prefill / batched-decode kernels (matmul_gemm.h) share: where a
// row group's weight blocks come from (GGUF rows gathered, or Panels16
// panels streamed with their prefetches), and the lane helpers of the block
// types (matmul_gemm_blocks32.h, matmul_gemm_kquants.h). Only include from
// files compiled with AVX-512 VNNI flags; everything is in an anonymous
// namespace (see matmul_gemm.h).
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
  PanelGroup(const MatrixView& m, int64_t r, PanelPrefetchPlan plan, size_t ahead)
      : base_(m.row(r)),
        block_bytes_(kRows * traits(m.type).block_bytes),
        odd_(panel_odd_piece(m.type)),
        prefetch_(block_bytes_, plan, ahead) {}
  // The group of the same matrix starting at row r.
  PanelGroup at(const MatrixView& m, int64_t r) const {
    PanelGroup g = *this;
    g.base_ = m.row(r);
    return g;
  }
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
  // Block b's prefetches in parts, for a caller that knows block_bytes_ at
  // compile time (kBlockBytes): a value holding what the parts read, for the
  // caller to capture by value (see keep_prefetch_in_place).
  template <size_t kBlockBytes>
  struct Parts {
    PanelPrefetch prefetch;
    const uint8_t* block;
    SHARDLM_GEMM_INLINE void part(int i, int parts) const { prefetch.part_if_spread(block, i, parts, kBlockBytes); }
  };
  template <size_t kBlockBytes>
  SHARDLM_GEMM_INLINE Parts<kBlockBytes> prefetch_parts(int64_t b) const {
    return {prefetch_, base_ + size_t(b) * kBlockBytes};
  }

 private:
  const uint8_t* base_;
  size_t block_bytes_;
  size_t odd_;
  PanelPrefetch prefetch_;
};

// The row groups of a's matrix as Src reads them; at(r, valid): the group
// from row r. What every group of a Panels16 matrix shares (its block size,
// its prefetches) is worked out once a kernel call, not once a group (one
// token streams a 2048-column group of 16 rows in ~1 us).
template <class Src>
class RowGroups {
 public:
  explicit RowGroups(const KernelArgs& a) : m_(*a.w) {}
  SHARDLM_GEMM_INLINE Src at(int64_t r, int valid) const { return Src(m_, r, valid); }

 private:
  const MatrixView& m_;
};
template <>
class RowGroups<PanelGroup> {
 public:
  explicit RowGroups(const KernelArgs& a) : m_(*a.w), first_(m_, 0, a.prefetch, a.prefetch_ahead) {}
  SHARDLM_GEMM_INLINE PanelGroup at(int64_t r, int) const { return first_.at(m_, r); }

 private:
  const MatrixView& m_;
  PanelGroup first_;
};

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

}  // namespace
}  // namespace shardlm::matmul_impl
