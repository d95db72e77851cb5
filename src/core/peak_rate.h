// Arithmetic throughput of one core, measured rather than assumed: what the
// prefill and batched-decode kernels are held against. An assumed peak (two
// 256-bit int8 instructions a cycle, say) reads a kernel at a third of an
// AVX-512 core's real rate as near its bound.
#pragma once

#include <string>

#include "core/cpu.h"

namespace shardlm {

struct PeakRates {
  double int8_mac_per_s = 0;  // multiply-adds of 8-bit codes the best int8 dot instruction sustains
  double f32_flop_per_s = 0;  // 2 × fused multiply-adds of the widest f32 vector
  std::string int8_instruction, f32_instruction;  // what was timed, e.g. "vpdpbusd zmm"
};

// Times independent register-only chains of the instructions the ISA's
// kernels use (scalar: zeros). Best of short runs over `min_seconds` in
// total, so time slices lost to other processes do not count.
PeakRates measure_peak_rates(Isa isa, double min_seconds);

namespace peak_rate_impl {
double amx_int8_mac_rate(double min_seconds);  // peak_rate_amx.cpp; only where cpu_caps().amx_int8
}

}  // namespace shardlm
