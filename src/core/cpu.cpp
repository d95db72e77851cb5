#include "core/cpu.h"

#include <cpuid.h>
#include <fmt/format.h>
#include <immintrin.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "core/amx_tile_config.h"
#include "core/error.h"

namespace shardlm {
namespace {

struct CpuidRegs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

CpuidRegs cpuid(unsigned leaf, unsigned subleaf) {
  CpuidRegs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return {};
  return r;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

// The trial bodies run in a forked child: an instruction the CPU or OS refuses
// kills only the child (SIGILL), and the parent reads that from its status.
__attribute__((target("avx2,fma,f16c"))) int trial_avx2() {
  volatile float in = 1.5f;
  __m256 v = _mm256_set1_ps(in);
  v = _mm256_fmadd_ps(v, v, v);
  __m256i i = _mm256_add_epi32(_mm256_castps_si256(v), _mm256_set1_epi32(1));
  return _mm256_extract_epi32(i, 3) == 0 ? 1 : 0;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) int trial_avx512() {
  volatile int in = 3;
  __m512i v = _mm512_set1_epi32(in);
  v = _mm512_add_epi32(v, v);
  __mmask16 k = _mm512_cmpeq_epi32_mask(v, _mm512_set1_epi32(6));
  return k == 0xffff ? 0 : 1;
}

__attribute__((target("avx512f,avx512vnni"))) int trial_avx512_vnni() {
  volatile int in = 1;
  __m512i v = _mm512_set1_epi32(in);
  v = _mm512_dpbusd_epi32(v, v, v);  // lane 1 + byte products 1·1 + 0·0 + 0·0 + 0·0
  int out[16];
  _mm512_storeu_si512(out, v);
  return out[0] == 2 && out[15] == 2 ? 0 : 1;
}

__attribute__((target("avx2,avxvnni"))) int trial_avx_vnni() {
  volatile int in = 1;
  __m256i v = _mm256_set1_epi32(in);
  v = _mm256_dpbusd_avx_epi32(v, v, v);  // as trial_avx512_vnni's, on ymm
  return _mm256_extract_epi32(v, 0) == 2 && _mm256_extract_epi32(v, 7) == 2 ? 0 : 1;
}

__attribute__((target("avx512f,avx512bf16"))) int trial_avx512_bf16() {
  volatile float in = 1.0f;
  __m512 v = _mm512_set1_ps(in);
  __m512bh b = _mm512_cvtne2ps_pbh(v, v);
  v = _mm512_dpbf16_ps(v, b, b);  // 1 + two 1·1 products per lane
  float out[16];
  _mm512_storeu_ps(out, v);
  return out[0] == 3.0f && out[15] == 3.0f ? 0 : 1;
}

__attribute__((target("amx-tile,amx-int8"))) int trial_amx() {
  TileConfig cfg;
  cfg.colsb[0] = 64;
  cfg.rows[0] = 16;
  load_tile_config(cfg);
  _tile_zero(0);
  _tile_release();
  return 0;
}

__attribute__((target("clflushopt"))) int trial_clflushopt() {
  volatile int line = 1;
  _mm_clflushopt(const_cast<int*>(&line));
  _mm_sfence();
  return line == 1 ? 0 : 1;
}

bool run_trial(const char* what, int (*fn)()) {
  const pid_t pid = fork();
  if (pid < 0) {
    spdlog::debug("cpu: fork failed; not using {}", what);
    return false;
  }
  if (pid == 0) _exit(fn());
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  spdlog::debug("cpu: trial {} {}", what, ok ? "ran" : "failed");
  return ok;
}

// Linux refuses tile data until the process asks for it.
bool request_amx_permission() {
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

CpuCaps detect() {
  CpuCaps caps;
  const CpuidRegs l0 = cpuid(0, 0);
  if (l0.a < 7) return caps;
  const CpuidRegs l1 = cpuid(1, 0);
  const CpuidRegs l7 = cpuid(7, 0);
  const CpuidRegs l7s1 = cpuid(7, 1);
  if (!bit(l1.c, 27)) return caps;  // no OSXSAVE: the OS manages no vector state
  const uint64_t xcr0 = xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
  const bool os_tiles = (xcr0 & (3u << 17)) == (3u << 17);

  const bool cpu_avx2 = bit(l1.c, 28) && bit(l1.c, 12) && bit(l1.c, 29) && bit(l7.b, 5) && bit(l7.b, 8);
  caps.avx2 = os_ymm && cpu_avx2 && run_trial("avx2", trial_avx2);
  const bool cpu_avx512 = bit(l7.b, 16) && bit(l7.b, 17) && bit(l7.b, 30) && bit(l7.b, 31);
  caps.avx512 = caps.avx2 && os_zmm && cpu_avx512 && run_trial("avx512", trial_avx512);
  caps.avx512_vnni = caps.avx512 && bit(l7.c, 11) && run_trial("avx512_vnni", trial_avx512_vnni);
  caps.avx512_bf16 = caps.avx512 && bit(l7s1.a, 5) && run_trial("avx512_bf16", trial_avx512_bf16);
  caps.avx_vnni = caps.avx2 && bit(l7s1.a, 4) && run_trial("avx_vnni", trial_avx_vnni);
  caps.clflushopt = bit(l7.b, 23) && run_trial("clflushopt", trial_clflushopt);
  const bool cpu_amx = bit(l7.d, 24) && bit(l7.d, 25);
  if (caps.avx512 && os_tiles && cpu_amx && request_amx_permission() && run_trial("amx", trial_amx)) {
    caps.amx_int8 = true;
    caps.amx_bf16 = bit(l7.d, 22);
  }
  return caps;
}

std::string brand_string() {
  if (cpuid(0x80000000u, 0).a < 0x80000004u) return "unknown CPU";
  char brand[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    const CpuidRegs r = cpuid(0x80000002u + i, 0);
    std::memcpy(brand + 16 * i + 0, &r.a, 4);
    std::memcpy(brand + 16 * i + 4, &r.b, 4);
    std::memcpy(brand + 16 * i + 8, &r.c, 4);
    std::memcpy(brand + 16 * i + 12, &r.d, 4);
  }
  std::string s(brand);
  const auto first = s.find_first_not_of(' ');
  const auto last = s.find_last_not_of(' ');
  return first == std::string::npos ? "unknown CPU" : s.substr(first, last - first + 1);
}

Isa best_isa(const CpuCaps& c) {
  // The AMX path needs the AVX-512 kernels for its row tails.
  if (c.amx_int8 && c.avx512_vnni) return Isa::Amx;
  if (c.avx512) return Isa::Avx512;
  if (c.avx2) return Isa::Avx2;
  return Isa::Scalar;
}

// SHARDLM_ISA: the highest ISA class the kernels may use, and whether the
// AVX2 class may use AVX-VNNI's dot products (all but "avx2" allow them).
struct IsaCap {
  Isa isa = Isa::Amx;
  bool avx_vnni = true;
};
IsaCap isa_cap_from_env() {
  const char* value = std::getenv("SHARDLM_ISA");
  if (!value || !*value) return {};
  const std::string_view v(value);
  if (v == "scalar") return {Isa::Scalar, true};
  if (v == "avx2") return {Isa::Avx2, false};
  if (v == "avx_vnni") return {Isa::Avx2, true};
  if (v == "avx512") return {Isa::Avx512, true};
  if (v == "amx") return {Isa::Amx, true};
  throw Error(fmt::format("environment variable SHARDLM_ISA={}: expected scalar, avx2, avx_vnni, avx512 or amx", v));
}

}  // namespace

const CpuCaps& cpu_caps() {
  static const CpuCaps caps = [] {
    CpuCaps c = detect();
    spdlog::debug("cpu: avx2={} avx_vnni={} avx512={} vnni={} bf16={} amx_int8={} amx_bf16={}", c.avx2, c.avx_vnni,
                  c.avx512, c.avx512_vnni, c.avx512_bf16, c.amx_int8, c.amx_bf16);
    return c;
  }();
  return caps;
}

bool isa_available(Isa isa) {
  const CpuCaps& c = cpu_caps();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return c.avx2;
    case Isa::Avx512: return c.avx512;
    case Isa::Amx: return c.amx_int8 && c.avx512_vnni;
  }
  return false;
}

Isa active_isa() {
  static const Isa isa = [] {
    Isa best = best_isa(cpu_caps());
    const Isa wanted = isa_cap_from_env().isa;
    if (int(wanted) < int(best)) best = wanted;
    spdlog::debug("cpu: kernels use {}", isa_name(best));
    return best;
  }();
  return isa;
}

bool avx_vnni_active() {
  static const bool active = cpu_caps().avx_vnni && isa_cap_from_env().avx_vnni;
  return active;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Amx: return "amx";
  }
  return "?";
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return int(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, CPU_COUNT(&set));
}

std::string cpu_summary() {
  const CpuCaps& c = cpu_caps();
  std::string s = brand_string() + ", " + std::to_string(std::thread::hardware_concurrency()) + " threads; usable:";
  s += c.avx2 ? " avx2+fma+f16c" : " (no avx2)";
  if (c.avx_vnni) s += " avx_vnni";
  if (c.avx512) s += " avx512";
  if (c.avx512_vnni) s += " avx512_vnni";
  if (c.avx512_bf16) s += " avx512_bf16";
  if (c.amx_int8) s += " amx_int8";
  if (c.amx_bf16) s += " amx_bf16";
  s += "; kernels: ";
  s += isa_name(active_isa());
  if (active_isa() == Isa::Avx2 && avx_vnni_active()) s += "+avx_vnni";
  return s;
}

}  // namespace shardlm
