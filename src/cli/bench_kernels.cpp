// `shardlm bench kernels`: memory-read bandwidth, then matvec (decode) GB/s as
// a fraction of it, then matmul (prefill) GOP/s next to a peak estimate, then
// decode attention's GB/s per ISA path.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "core/bench_matrix.h"
#include "core/clock.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/matmul.h"
#include "core/huge_pages.h"
#include "core/membw.h"
#include "core/ops.h"
#include "core/peak_rate.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace shardlm::cli {
namespace {

struct KernelBenchOptions {
  bool quick = false;
  int threads = usable_cpus();
  std::string types;
};

const char* kAllTypes = "F32,F16,BF16,Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,Q2_K,Q3_K,Q4_K,Q5_K,Q6_K";
const char* kQuickTypes = "Q4_0,Q8_0,Q4_K,F16";

std::vector<DType> parse_types(const std::string& list) {
  std::vector<DType> out;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name.empty()) continue;
    const auto t = dtype_from_name(name);
    if (!t || !traits(*t).compute || *t == DType::Q8_1 || *t == DType::Q8_K)
      throw Error(fmt::format("--types: '{}' is not a weight type matmul supports ({})", name, kAllTypes));
    out.push_back(*t);
  }
  if (out.empty()) throw Error("--types: empty list");
  return out;
}

// Best time of repeated calls, for at least min_seconds and 3 calls.
template <class Fn>
double best_seconds(double min_seconds, Fn&& fn) {
  double best = 1e30, spent = 0;
  for (int i = 0; i < 3 || spent < min_seconds; ++i) {
    const auto t0 = SteadyClock::now();
    fn();
    const double s = seconds_since(t0);
    best = std::min(best, s);
    spent += s;
  }
  return best;
}

// Core clock from a loop of dependent 1-cycle decrements (one per cycle);
// the best of many short runs, so that time slices lost to other processes
// on a shared machine do not count.
double estimate_ghz(double min_seconds) {
  const uint64_t iterations = 10'000'000;
  return iterations / best_seconds(min_seconds, [&] {
           uint64_t n = iterations;
           __asm__ volatile("1: dec %0\n\tjnz 1b" : "+r"(n));
         }) / 1e9;
}

using Pools = std::vector<std::unique_ptr<ThreadPool>>;  // pools[n - 1] has n threads

// Read bandwidth with 1..threads threads, the yardstick of the decode table.
std::vector<double> print_bandwidth_table(const KernelBenchOptions& o, const Pools& pools) {
  const size_t bw_bytes = o.quick ? (128u << 20) : dram_probe_bytes();
  fmt::print("memory read bandwidth ({} MiB buffer, best of {})\n", bw_bytes >> 20, o.quick ? 2 : 5);
  fmt::print("| threads | GB/s |\n|---:|---:|\n");
  std::vector<double> bw;
  for (int n = 1; n <= o.threads; ++n) {
    bw.push_back(measure_read_bandwidth(bw_bytes, pools[size_t(n - 1)].get(), o.quick ? 2 : 5));
    fmt::print("| {} | {:.1f} |\n", n, bw.back());
  }
  return bw;
}

struct Shape {
  int64_t rows, cols;
};

struct DecodeCase {
  Shape shape;
  int64_t tokens;
};

// One row per ISA with its own kernel for the type (scalar, 100x slower,
// only when --types names at most 3 types, and only for 1 token on the
// smaller shape) on GGUF rows, and where a model repacks the type here
// (panels_pay) one row `panels ISA` per ISA with a panel kernel for it: the
// row marked * is what a model's matrix runs (on rows: the dispatcher's pick,
// timed on first use for quantized types, a fixed rule for floats).
void print_decode_rows(const KernelBenchOptions& o, const std::vector<DType>& types, DType type, const DecodeCase& c,
                       const Pools& pools, const std::vector<double>& bw, double min_time) {
  const Shape& s = c.shape;
  const BenchMatrix m = make_bench_matrix(type, s.rows, s.cols);
  const BenchMatrix model = make_model_bench_matrix(type, s.rows, s.cols);
  const bool panels = model.view.layout == WeightLayout::Panels16;
  std::vector<float> x(size_t(s.cols * c.tokens), 0.5f), y(size_t(s.rows * c.tokens));
  const double bytes = double(m.view.row_stride) * double(s.rows);
  const Isa chosen = matmul_kernel_isa(type, c.tokens);
  const auto print_row = [&](const std::string& kernel, bool runs, auto&& call, const std::string& prefetch = "") {
    for (int n = 1; n <= o.threads; ++n) {
      ThreadPool* pool = pools[size_t(n - 1)].get();
      PreparedInput prepared(x.data(), c.tokens, s.cols);
      const double sec = best_seconds(min_time, [&] { call(prepared, pool); });
      const double gbs = bytes / sec / 1e9;
      fmt::print("| {} | {}x{} | {} | {}{} | {:.1f} | {} | {:.0f} | {:.1f} | {:.0f}% | {} |\n", dtype_name(type),
                 s.rows, s.cols, c.tokens, kernel, runs ? " *" : "", bytes / 1048576.0, n, sec * 1e6, gbs,
                 100.0 * gbs / bw[size_t(n - 1)], prefetch);
    }
  };
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx}) {
    if (!isa_has_kernel(isa, type, c.tokens) || isa > active_isa()) continue;
    const bool few_types = !o.types.empty() && types.size() <= 3;
    if (isa == Isa::Scalar && chosen != Isa::Scalar && (!few_types || s.rows > 4096 || c.tokens > 1)) continue;
    print_row(isa_name(isa), !panels && isa == chosen,
              [&](PreparedInput& in, ThreadPool* pool) { matmul_with_isa(isa, m.view, in, y.data(), pool); });
  }
  if (!panels) return;
  const Isa panel_choice = panel_kernel_isa(active_isa(), type, c.tokens);
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Amx}) {
    if (isa > active_isa() || panel_kernel_isa(isa, type, c.tokens) != isa) continue;
    print_row(
        fmt::format("panels {}", isa_name(isa)), isa == panel_choice,
        [&](PreparedInput& in, ThreadPool* pool) { matmul_with_isa(isa, model.view, in, y.data(), pool); },
        panel_prefetch_summary(isa, type, c.tokens));
  }
}

void print_decode_table(const KernelBenchOptions& o, const std::vector<DType>& types, const Pools& pools,
                        const std::vector<double>& bw, double min_time) {
  std::vector<Shape> shapes = {{4096, 4096}};
  if (!o.quick) shapes.push_back({128256, 2048});
  fmt::print(
      "\ndecode: weight bytes / time; % of the measured read bandwidth; * = the kernel matmul() picks; prefetch: the "
      "panel kernel's plan, timed per process (SHARDLM_PREFETCH pins one)\n");
  fmt::print("| type | rows x cols | tokens | isa | MiB | threads | us | GB/s | % of bw | prefetch |\n"
             "|---|---|---:|---|---:|---:|---:|---:|---:|---|\n");
  std::vector<DecodeCase> cases;
  for (const Shape& s : shapes) cases.push_back({s, 1});
  // 3: decode kernels; 4 and 8: batched decode, where the AVX-512 and AMX
  // panel kernels are timed against each other.
  for (int64_t tokens : {3, 4, 8}) cases.push_back({shapes[0], tokens});
  // 4 tokens with the weights streamed from memory, as batched decode reads
  // them: near the one-token row's GB/s where the weights are the limit,
  // below it where the arithmetic is.
  if (shapes.size() > 1) cases.push_back({shapes[1], 4});
  for (DType type : types)
    for (const DecodeCase& c : cases) print_decode_rows(o, types, type, c, pools, bw, min_time);
}

// The measured rates of the instructions the active ISA's kernels use; with
// AMX also AVX-512 VNNI's, which runs the 4–8-token batched decode.
PeakRates print_peak_rates(double min_time) {
  const Isa isa = active_isa();
  const PeakRates p = measure_peak_rates(isa, min_time);
  auto line = [](const PeakRates& r) {
    fmt::print("peak per thread, measured: int8 {:.0f} G multiply-adds/s ({}), f32 {:.0f} GFLOP/s ({})\n",
               r.int8_mac_per_s / 1e9, r.int8_instruction.empty() ? "none" : r.int8_instruction,
               r.f32_flop_per_s / 1e9, r.f32_instruction.empty() ? "none" : r.f32_instruction);
  };
  line(p);
  if (isa == Isa::Amx) {
    const PeakRates vnni = measure_peak_rates(Isa::Avx512, min_time);
    fmt::print("peak per thread, measured: int8 {:.0f} G multiply-adds/s ({}, the batched-decode tiles)\n",
               vnni.int8_mac_per_s / 1e9, vnni.int8_instruction);
  }
  return p;
}

void print_prefill_table(const KernelBenchOptions& o, const std::vector<DType>& types, const Pools& pools,
                         const PeakRates& peak, double min_time) {
  const int64_t n_tokens = o.quick ? 64 : 512, dim = o.quick ? 2048 : 4096;
  const double ops = 2.0 * double(n_tokens) * double(dim) * double(dim);
  fmt::print("\nmatmul (prefill): {} tokens x {}x{} weights in a model's layout here, GOP/s (2 ops per multiply-add)\n",
             n_tokens, dim, dim);
  fmt::print("| type | threads | ms | GOP/s | % of peak |\n|---|---:|---:|---:|---:|\n");
  std::vector<float> x(size_t(n_tokens * dim)), y(size_t(n_tokens * dim));
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  for (DType type : types) {
    const BenchMatrix m = make_model_bench_matrix(type, dim, dim);
    const bool is_float = traits(type).block_elems == 1;
    for (int n = 1; n <= o.threads; ++n) {
      ThreadPool* pool = pools[size_t(n - 1)].get();
      const double sec = best_seconds(min_time, [&] { matmul(m.view, x.data(), n_tokens, y.data(), pool); });
      const double peak_ops = n * (is_float ? peak.f32_flop_per_s : 2 * peak.int8_mac_per_s);
      fmt::print("| {} | {} | {:.1f} | {:.1f} | {} |\n", dtype_name(type), n, sec * 1e3, ops / sec / 1e9,
                 peak_ops > 0 ? fmt::format("{:.0f}%", 100.0 * ops / sec / peak_ops) : "-");
    }
  }
}

// Decode attention per ISA path, one thread: a token's 4 query heads (a
// Llama 3's group) over each of many cached K/V heads of one context, f32
// rows on 2 MiB pages as in the KV cache, more of them than the caches hold,
// so the rows come from memory as in a decode step; each ISA in both sum
// orders (ops::SumOrder: "blocks" is what a model serving several sequences
// runs).
void print_attention_table(bool quick, double bandwidth_gbs, double min_time) {
  fmt::print("\ndecode attention: 4 query heads per K/V head, f32 cache; K and V bytes / time, 1 thread; "
             "* = the path attend() picks; order: ops::SumOrder (blocks: a server of several sequences)\n");
  fmt::print("| head dim | positions | isa | order | MiB | us per head | GB/s | % of bw |\n|---:|---:|---|---|---:|---:|---:|---:|\n");
  struct Case { int64_t dim, n_pos; };
  const std::vector<Case> cases = quick ? std::vector<Case>{{64, 1024}} : std::vector<Case>{{64, 1024}, {64, 4096}, {128, 4096}};
  const int64_t n_q = 4;
  const size_t total_bytes = size_t(quick ? 64 : 256) << 20;
  for (const Case& c : cases) {
    const size_t head_floats = size_t(c.n_pos * c.dim);
    const int64_t heads = std::max<int64_t>(1, int64_t(total_bytes / (2 * head_floats * sizeof(float))));
    const size_t bytes = size_t(heads) * head_floats * sizeof(float);
    auto k = alloc_huge_page_buffer(bytes), v = alloc_huge_page_buffer(bytes);
    auto* kf = reinterpret_cast<float*>(k.get());
    auto* vf = reinterpret_cast<float*>(v.get());
    for (size_t i = 0; i < size_t(heads) * head_floats; ++i) {
      kf[i] = float(int(i * 2654435761u >> 22) - 512) * 1e-3f;
      vf[i] = float(int(i * 40503u >> 6) % 1024 - 512) * 1e-3f;
    }
    std::vector<float> q(size_t(n_q * c.dim), 0.05f), scores(size_t(n_q * c.n_pos)), out(size_t(n_q * c.dim));
    ops::KvHead kv{kf, vf, c.dim, c.dim, c.dim, c.dim, false};
    const Isa chosen = ops::attend_isa(kv);
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (isa > active_isa() || (isa == Isa::Scalar && chosen != Isa::Scalar)) continue;
      for (const ops::SumOrder order : {ops::SumOrder::Fastest, ops::SumOrder::AsBlocks}) {
        if (isa == Isa::Scalar && order == ops::SumOrder::AsBlocks) continue;  // per token either way
        bool taken = true;
        const double sec = best_seconds(min_time, [&] {
          for (int64_t h = 0; h < heads && taken; ++h) {
            ops::KvHead head = kv;
            head.k = kf + size_t(h) * head_floats;
            head.v = vf + size_t(h) * head_floats;
            taken = ops::attend_with_isa(isa, q.data(), n_q, head, c.n_pos, 0.125f, scores.data(), out.data(), order);
          }
        });
        if (!taken) continue;
        const double gbs = 2.0 * double(bytes) / sec / 1e9;
        fmt::print("| {} | {} | {}{} | {} | {:.0f} | {:.0f} | {:.1f} | {} |\n", c.dim, c.n_pos, isa_name(isa),
                   isa == chosen ? " *" : "", order == ops::SumOrder::AsBlocks ? "blocks" : "fastest",
                   2.0 * double(bytes) / (1 << 20), sec * 1e6 / double(heads), gbs,
                   bandwidth_gbs > 0 ? fmt::format("{:.0f}%", 100.0 * gbs / bandwidth_gbs) : "-");
      }
    }
  }
}

void run_kernel_bench(const KernelBenchOptions& o) {
  if (o.threads < 1 || o.threads > 256) throw Error(fmt::format("--threads {}: expected 1..256", o.threads));
  const auto types = parse_types(o.types.empty() ? (o.quick ? kQuickTypes : kAllTypes) : o.types);
  const double min_time = o.quick ? 0.02 : 0.25;
  fmt::print("{}\n", cpu_summary());
  const double ghz = estimate_ghz(o.quick ? 0.05 : 0.3);
  fmt::print("core clock ~{:.2f} GHz (dependent-decrement loop)\n", ghz);
  const PeakRates peak = print_peak_rates(o.quick ? 0.05 : 0.2);
  fmt::print("\n");
  Pools pools;
  for (int n = 1; n <= o.threads; ++n) pools.push_back(std::make_unique<ThreadPool>(n));
  const std::vector<double> bw = print_bandwidth_table(o, pools);
  print_decode_table(o, types, pools, bw, min_time);
  print_prefill_table(o, types, pools, peak, min_time);
  print_attention_table(o.quick, bw.empty() ? 0.0 : bw[0], min_time);
}

}  // namespace

void add_bench_kernels(CLI::App& bench) {
  auto opts = std::make_shared<KernelBenchOptions>();
  auto* cmd = bench.add_subcommand("kernels", "memory bandwidth, matvec GB/s and matmul GOP/s per weight type");
  cmd->add_flag("--quick", opts->quick, "small sizes, a few seconds");
  cmd->add_option("--threads", opts->threads, "measure with 1..N threads")->capture_default_str();
  cmd->add_option("--types", opts->types, std::string("comma-separated weight types (default: all: ") + kAllTypes + ")");
  cmd->callback([opts] { run_kernel_bench(*opts); });
}

}  // namespace shardlm::cli
