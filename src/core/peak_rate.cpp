#include "core/peak_rate.h"

#include <algorithm>
#include <cstdint>

#include "core/clock.h"

namespace shardlm {
namespace {

constexpr uint64_t kIterations = 200'000;

// One instruction on 14 accumulators per iteration (enough to cover any
// latency × ports here), operands in registers 14 and 15: the first 16
// vector registers, so this file builds without AVX-512 flags. The assembler
// takes any instruction; the caller runs only what cpu_caps() allows.
constexpr int kChains = 14;
#define SHARDLM_X14(op, r)                                                                                \
  op " " r "14, " r "15, " r "0\n\t" op " " r "14, " r "15, " r "1\n\t" op " " r "14, " r "15, " r "2\n\t"     \
  op " " r "14, " r "15, " r "3\n\t" op " " r "14, " r "15, " r "4\n\t" op " " r "14, " r "15, " r "5\n\t"     \
  op " " r "14, " r "15, " r "6\n\t" op " " r "14, " r "15, " r "7\n\t" op " " r "14, " r "15, " r "8\n\t"     \
  op " " r "14, " r "15, " r "9\n\t" op " " r "14, " r "15, " r "10\n\t" op " " r "14, " r "15, " r "11\n\t"   \
  op " " r "14, " r "15, " r "12\n\t" op " " r "14, " r "15, " r "13\n\t"

#define SHARDLM_TIMED_LOOP(body)                                                                              \
  [] {                                                                                                        \
    uint64_t n = kIterations;                                                                                 \
    __asm__ volatile("1:\n\t" body "dec %0\n\tjnz 1b"                                                         \
                     : "+r"(n)                                                                                \
                     :                                                                                        \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
                       "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");                                          \
  }

// Instructions per second of a loop issuing `per_iteration` of them.
template <class Loop>
double rate(Loop loop, int per_iteration, double min_seconds) {
  double best = 1e30, spent = 0;
  while (spent < min_seconds) {
    const auto t0 = SteadyClock::now();
    loop();
    const double s = seconds_of(SteadyClock::now() - t0);
    best = std::min(best, s);
    spent += s;
  }
  return double(kIterations) * per_iteration / best;
}

}  // namespace

PeakRates measure_peak_rates(Isa isa, double min_seconds) {
  PeakRates p;
#if defined(__x86_64__)
  const double half = min_seconds / 2;
  if (isa >= Isa::Amx && cpu_caps().amx_int8) {
    p.int8_instruction = "tdpbusd 16x64 tiles";
    p.int8_mac_per_s = peak_rate_impl::amx_int8_mac_rate(half);
  } else if (isa >= Isa::Avx512 && cpu_caps().avx512_vnni) {
    p.int8_instruction = "vpdpbusd zmm";
    p.int8_mac_per_s = 64 * rate(SHARDLM_TIMED_LOOP(SHARDLM_X14("vpdpbusd", "%%zmm")), kChains, half);
  } else if (isa >= Isa::Avx2) {
    // The AVX2 kernels multiply with vpmaddubsw (32 code pairs into 16
    // sums) and still need a vpmaddwd to widen: the instruction rate bounds them.
    p.int8_instruction = "vpmaddubsw ymm";
    p.int8_mac_per_s = 32 * rate(SHARDLM_TIMED_LOOP(SHARDLM_X14("vpmaddubsw", "%%ymm")), kChains, half);
  }
  if (isa >= Isa::Avx512) {
    p.f32_instruction = "vfmadd231ps zmm";
    p.f32_flop_per_s = 32 * rate(SHARDLM_TIMED_LOOP(SHARDLM_X14("vfmadd231ps", "%%zmm")), kChains, half);
  } else if (isa >= Isa::Avx2) {
    p.f32_instruction = "vfmadd231ps ymm";
    p.f32_flop_per_s = 16 * rate(SHARDLM_TIMED_LOOP(SHARDLM_X14("vfmadd231ps", "%%ymm")), kChains, half);
  }
#else
  (void)isa;
  (void)min_seconds;
#endif
  return p;
}

}  // namespace shardlm
