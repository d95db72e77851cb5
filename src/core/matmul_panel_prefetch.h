// What a thread streaming a Panels16 matrix prefetches in software, shared by
// the AVX-512 / AMX panel sources (matmul_gemm_common.h's PanelGroup) and the AVX2
// panel kernels (matmul_panels_avx2.cpp). Consecutive groups are consecutive
// bytes, so a thread's rows are one stream, read a block at a time by the
// same load instructions, each stepping one block. What the core's
// prefetchers make of that stream differs between CPUs, so the plan
// (matmul_kernels.h's PanelPrefetchPlan) is timed per type and token count
// (matmul_prefetch_plan.cpp). What was measured, from DRAM:
// - Zen 5 (docs/bench/dec5.md, bat7.md): one token of the 32-element types
//   (blocks of 288-544 bytes a group) streams fastest with the page starts
//   alone (the stride prefetchers follow the stream but stop at each 4 KiB
//   page; every line into L1 on top was 1.4-1.8x slower); 2-8 tokens with
//   every line into L2 as well (14-23 % ahead); the K-quants (2304-3360
//   bytes a block: too long a stride to be followed) with every line into L1.
// - Xeon with AMX (2026-12-03): every line into L2 for every type and token
//   count, the 32-element types at one token 1.3-1.8x the page starts alone;
//   a K-quant super-block's prefetches spread over its work, a part before
//   each of its 64 code vectors (matmul_gemm_kquants.h's KQuant::block_in_place,
//   matmul_kquant_panels_avx2.cpp's panel_rows): one burst of 36-53
//   prefetches before each super-block held the loads back. Spread in 4
//   parts, 1B Q4_K_M decoded 7-16 % faster than with the burst; in 64, 14-17 %
//   faster again (AVX-512 and AVX2, 2026-12-04), with a 288-420 MiB Q4_K
//   matrix from DRAM streaming 16.3 GB/s against 13.4 (Q6_K 16.8 / 13.1).
//   From DRAM (1.1-1.2 GiB matrices, one token) Q4_0 streamed 16.1 GB/s
//   with every line into L2 3 KiB ahead against 14.7 at 8 KiB, Q4_K spread
//   15.1 at 2 KiB against 13.9, and Q6_K spread the other way (12.3 at 2
//   KiB, 14.3 at 8).
// `ahead` bytes ahead of the block being read (past the group's end too:
// prefetches do not fault), timed with the plan (matmul_kernels.h's
// kPrefetchAheadFar / kPrefetchAheadNear).
// Included only from ISA kernel files; internal linkage (see
// matmul_avx2_common.h).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

class PanelPrefetch {
 public:
  // `block_bytes`: a block of the 16 rows.
  PanelPrefetch(size_t block_bytes, PanelPrefetchPlan plan, size_t ahead)
      : block_bytes_(block_bytes),
        ahead_(ahead),
        page_starts_(!plan_to_l1(plan)),
        lines_to_l2_(plan == PanelPrefetchPlan::kLinesToL2 || plan == PanelPrefetchPlan::kSpreadToL2),
        spread_(plan_spreads(plan)) {}

  // Before reading the block at p: all of its prefetches.
  inline __attribute__((always_inline)) void ahead_of(const uint8_t* p) const { ahead_of(p, block_bytes_); }
  // The same with the block's size (the one this was made with) passed as a
  // constant (see part_if_spread).
  inline __attribute__((always_inline)) void ahead_of(const uint8_t* p, size_t block_bytes) const {
    part_ahead_of(p, 0, 1, block_bytes);
  }

  // For a kernel that can spread a block's prefetches over its work: before
  // the block at p all of them, unless the plan spreads them, and then part
  // `part` of `parts` at each of its steps.
  inline __attribute__((always_inline)) void ahead_of_unless_spread(const uint8_t* p) const {
    if (!spread_) ahead_of(p);
  }
  // The kernel passes the block's size (the one this was made with) as a
  // constant: each part's lines are constants then, and a part the
  // prefetches alone. From block_bytes_, each of a K-quant super-block's 64
  // parts took a multiply, a loop and ~10 scalar instructions around it,
  // with the loop bounds spilled: at 8 tokens, where Q4_K is bound by issue,
  // most of the kernel's scalar work. (Where the step streams from DRAM the
  // AVX-512 kernels follow each part with keep_prefetch_in_place().)
  inline __attribute__((always_inline)) void part_if_spread(const uint8_t* p, int part, int parts,
                                                            size_t block_bytes) const {
    if (spread_) part_ahead_of(p, part, parts, block_bytes);
  }

  // Part `part` of `parts` of ahead_of(p, block_bytes): its share of the
  // lines (the page start with part 0).
  inline __attribute__((always_inline)) void part_ahead_of(const uint8_t* p, int part, int parts,
                                                           size_t block_bytes) const {
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + ahead_;  // may be past the matrix: no pointer to it
    const size_t lines = (block_bytes + 63) / 64;
    const size_t first = lines * size_t(part) / size_t(parts), end = lines * size_t(part + 1) / size_t(parts);
    if (!page_starts_) {
      for (size_t line = first; line < end; ++line)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * line), _MM_HINT_T0);
      return;
    }
    if (lines_to_l2_) {
      for (size_t line = first; line < end; ++line)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * line), _MM_HINT_T1);
    }
    // The page starting in [ahead, ahead + block_bytes), if any: each page
    // start falls in exactly one block's range.
    const uintptr_t page = (ahead + block_bytes - 1) & ~uintptr_t(kPage - 1);
    if (part == 0 && page >= ahead) {
      _mm_prefetch(reinterpret_cast<const char*>(page), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(page + 64), _MM_HINT_T0);
    }
  }

 private:
  static constexpr size_t kPage = 4096;
  size_t block_bytes_;
  size_t ahead_;
  bool page_starts_;  // else every line into L1
  bool lines_to_l2_;  // and every line into L2
  bool spread_;
};

// After a prefetch part whose lines are constants: a compiler barrier (no
// instruction) that keeps the part where the kernel issues it among its code
// loads. Free to move the constant parts, GCC cost a one-token Q4_K stream
// from DRAM 6-14 % (1.1 GB matrix, AMX Xeon) against parts computed at run
// time, which it could not move; with the barrier the constant parts stream
// as fast and run 1.4x faster in cache. Each kernel says up to how many
// tokens it measured this faster (its step streaming from DRAM, not bound by
// the arithmetic, which the barrier slows in cache). What a part reads (the
// plan, the block's address) must be values the kernel holds, captured by
// value: read through a reference, GCC loaded them again from memory after
// every barrier, three flag tests and two reloads a prefetched line. Held as
// values, the AMX Xeon ran Q4_K and Q6_K 1.2x faster in cache and 1B Q4_K_M's
// matrices 1-4 % faster from DRAM (AVX-512 and AVX2).
inline __attribute__((always_inline)) void keep_prefetch_in_place() { asm volatile("" ::: "memory"); }

}  // namespace
}  // namespace shardlm::matmul_impl
