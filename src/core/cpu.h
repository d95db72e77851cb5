// What this CPU *and this OS* let us run. Each capability is requested from the
// OS where needed (AMX: arch_prctl ARCH_REQ_XCOMP_PERM) and verified by running
// a trial instruction in a child-safe way, never taken from CPUID alone.
#pragma once

#include <string>

namespace shardlm {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Amx = 3 };

struct CpuCaps {
  bool avx2 = false;        // + FMA + F16C
  bool avx512 = false;      // F + BW + VL + DQ
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool avx_vnni = false;    // VEX vpdpbusd on ymm (Alder Lake and later, Zen 5): the AVX2 panel kernels' dot products
  bool amx_int8 = false;    // tiles permitted by the OS and a trial ran
  bool amx_bf16 = false;
  bool clflushopt = false;  // cache-line flushes not ordered among themselves (the kernel timings' flush)
};

const CpuCaps& cpu_caps();

// The best ISA available, capped by the environment variable SHARDLM_ISA
// (scalar|avx2|avx_vnni|avx512|amx) so tests and benchmarks can force a path.
// avx_vnni is the AVX2 class with AVX-VNNI's dot products, avx2 without them.
Isa active_isa();
// Whether the AVX2 kernels that have a vpdpbusd form use it: the CPU has
// AVX-VNNI and SHARDLM_ISA is not avx2.
bool avx_vnni_active();
bool isa_available(Isa isa);
const char* isa_name(Isa isa);
std::string cpu_summary();  // one line: model name and usable ISAs

// CPUs this process may run on now: its affinity, which taskset, a cpuset
// (containers, Slurm) or an MPI launcher's binding narrow; at least 1. The
// default thread count everywhere.
int usable_cpus();

}  // namespace shardlm
