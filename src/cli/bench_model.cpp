// `shardlm bench -m MODEL`: prompt processing and decode speed at each thread
// count, next to the bound memory bandwidth puts on decoding (every weight
// matrix is read once per token). With --nodes/--hostfile the same measurement
// runs on workers (bench_cluster.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_common.h"
#include "cli/commands.h"
#include "cli/run_cluster.h"
#include "cli/usage.h"
#include "core/clock.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/matmul.h"
#include "core/membw.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/sampler.h"
#include "core/memory_usage.h"
#include "model/prompt.h"

namespace shardlm::cli {
namespace {

struct ModelBenchOptions {
  std::string model;
  std::vector<int> threads = {1, 2};
  int prompt = 512;
  int gen = 128;
  int batch = 512;
  std::string kv_type = "f32";
  bool mmap = false;
  int bandwidth_mib = 0;  // 0: dram_probe_bytes(), beyond the caches, so the read rate is DRAM's
  ClusterRunOptions cluster;
};

// What the weights take in memory after a run: the file's pages the process
// maps (all of the file, header included) and the copies the model owns.
struct WeightsResident {
  int64_t file_mapped = -1;
  size_t owned = 0;
};

struct ThreadsRow {
  int threads;
  double prompt_tps, decode_tps, matmuls_tps, bandwidth_gbs;
  WeightsResident weights;
};

// The matrix products of a decode step alone: every weight matrix the step
// reads (of a stack of routed experts, its first rows in the share a step
// reads), one token each, through the model's kernels and threads with
// nothing in between, `passes` times; their rate in steps a second. Beside
// the decode rate it tells how fast the kernels stream the weights apart
// from everything else a step does (attention, norms, waits between them).
double matmuls_alone_tps(const ModelWeights& weights, ThreadPool* pool, int passes) {
  std::vector<MatrixView> step;
  weights.for_each_matrix(1, [&](const MatrixView& m, double share, bool) {
    MatrixView read = m;
    if (share < 1.0)
      read.rows = std::min(m.rows, std::max<int64_t>(16, int64_t(std::llround(share * double(m.rows) / 16)) * 16));
    step.push_back(read);
  });
  int64_t widest = 1, tallest = 1;
  for (const MatrixView& m : step) {
    widest = std::max(widest, m.cols);
    tallest = std::max(tallest, m.rows);
  }
  std::vector<float> x(static_cast<size_t>(widest)), y(static_cast<size_t>(tallest));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8) / 8.0f;
  const auto t0 = SteadyClock::now();
  for (int p = 0; p < passes; ++p)
    for (const MatrixView& m : step) matmul(m, x.data(), 1, y.data(), pool);
  return double(passes) / seconds_since(t0);
}

ThreadsRow bench_threads(const gguf::File& file, const ModelBenchOptions& o, int threads, DType kv_type) {
  auto pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  ModelOptions mo;
  mo.n_ctx = o.prompt + o.gen + 1;
  mo.n_batch = std::min(o.batch, std::max(o.prompt, 1));
  mo.kv_type = kv_type;
  mo.weights_in_memory = !o.mmap;
  // The KV cache resident from the start, as serve has it: otherwise the
  // decode timed the faults of the cache's first touches (1B Q4_0, 100
  // tokens: 8.5 against 2.0 us a layer to store a token's keys and values).
  mo.commit_kv_cache = true;
  // As llama-bench's warm-up run does: the kernel choices a prompt meets
  // (a mixture of experts: most batch sizes of 1-15 tokens) are not timed
  // inside the timed prompt.
  mo.time_kernels_at_load = true;
  mo.pool = pool.get();
  Model model(file, mo);
  const int64_t n_vocab = model.config().n_vocab;

  const auto prompt = bench_prompt_tokens(o.prompt, n_vocab);

  Batch warm;  // faults the mapped weights in before anything is timed
  warm.add(0, 0, prompt.empty() ? 0 : prompt[0], true);
  model.forward(warm);

  ThreadsRow r{threads, 0, 0, 0, 0, {}};
  auto t0 = SteadyClock::now();
  if (!prompt.empty()) {
    eval_prompt(model, prompt, 0, 0);
    r.prompt_tps = double(prompt.size()) / seconds_since(t0);
  }
  TokenId next = prompt.empty() ? 0 : argmax(model.logits(0));
  t0 = SteadyClock::now();
  for (int i = 0; i < o.gen; ++i) {
    Batch b;
    b.add(0, o.prompt + i, next, true);
    model.forward(b);
    next = argmax(model.logits(0));
  }
  if (o.gen > 0) {
    r.decode_tps = double(o.gen) / seconds_since(t0);
    r.matmuls_tps = matmuls_alone_tps(model.weights(), pool.get(), std::min(o.gen, 8));
  }
  r.weights = {mapped_resident_bytes(file.bytes(), file.file_size()), model.weights().owned_bytes()};
  return r;
}

void bench_model(const ModelBenchOptions& o) {
  const DType kv_type = kv_type_of(o.kv_type);
  const auto t_load = SteadyClock::now();
  auto file = gguf::File::open(o.model);
  const auto config = ModelConfig::from_gguf(*file);
  const auto weights = ModelWeights::map(*file, config, RankPlan::whole(config));
  const double load_ms = seconds_since(t_load) * 1e3;
  const double bytes_per_token = double(weights.matrix_bytes_per_token());

  std::printf("model:   %s (%.1f MiB file, %.1f MiB of matrices read per decoded token)\n", o.model.c_str(),
              double(file->file_size()) / (1 << 20), bytes_per_token / (1 << 20));
  std::printf("config:  %s\n", config.summary().c_str());
  std::printf("cpu:     %s\n", cpu_summary().c_str());
  std::printf("load:    %.1f ms; prompt %d tokens (batch %d), decode %d tokens, KV %s\n\n", load_ms, o.prompt,
              std::min(o.batch, o.prompt), o.gen, o.kv_type.c_str());
  // "matmuls alone": matmuls_alone_tps, a step's matrix products with nothing between them.
  std::printf("| threads | prompt tok/s | decode tok/s | read GB/s | decode bound tok/s | of bound | matmuls alone tok/s "
              "| of bound |\n");
  std::printf("|--------:|-------------:|-------------:|----------:|-------------------:|---------:|--------------------:"
              "|---------:|\n");
  std::vector<ThreadsRow> rows;
  for (const int t : o.threads) rows.push_back(bench_threads(*file, o, t, kv_type));
  // Read before the bandwidth buffer below raises the peak.
  const auto mem = read_memory_usage();
  const size_t probe_bytes = o.bandwidth_mib > 0 ? size_t(o.bandwidth_mib) << 20 : dram_probe_bytes();
  for (auto& r : rows) {
    auto pool = r.threads > 1 ? std::make_unique<ThreadPool>(r.threads) : nullptr;
    r.bandwidth_gbs = measure_read_bandwidth(probe_bytes, pool.get(), 3);
    const double bound = r.bandwidth_gbs * 1e9 / bytes_per_token;
    std::printf("| %7d | %12.1f | %12.2f | %9.1f | %18.2f | %7.0f%% | %19.2f | %7.0f%% |\n", r.threads, r.prompt_tps,
                r.decode_tps, r.bandwidth_gbs, bound, 100.0 * r.decode_tps / bound, r.matmuls_tps,
                100.0 * r.matmuls_tps / bound);
  }
  std::printf("\nbound:   the matrix bytes of a token read at the rate of a %zu MiB buffer (same threads, best of 3)\n",
              probe_bytes >> 20);
  std::printf("memory:  VmRSS %.1f MiB, VmHWM %.1f MiB (weights mapped + KV cache + scratch)\n",
              double(mem.rss_kib) / 1024, double(mem.hwm_kib) / 1024);
  const WeightsResident& w = rows.back().weights;
  if (w.file_mapped >= 0) {
    const double total = double(w.file_mapped) + double(w.owned), file_bytes = double(file->file_size());
    std::printf("weights: %.1f MiB resident = %.2f x the file (%.1f MiB of the file mapped + %.1f MiB of copies)\n",
                total / (1 << 20), total / file_bytes, double(w.file_mapped) / (1 << 20), double(w.owned) / (1 << 20));
  }
}

}  // namespace

void add_bench_model(CLI::App& bench) {
  auto o = std::make_shared<ModelBenchOptions>();
  bench.add_option("-m,--model", o->model, "GGUF model: prompt and decode tokens/s against the bandwidth bound");
  bench.add_option("-t,--threads", o->threads, "comma-separated thread counts (with --nodes: one, per worker; "
                   "default: all its cores)")
      ->capture_default_str()
      ->delimiter(',')
      ->check(integer_in(1, 1024));
  bench.add_option("--prompt", o->prompt, "prompt tokens")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  bench.add_option("--gen", o->gen, "decoded tokens")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  bench.add_option("--batch", o->batch, "prompt tokens per forward pass")->capture_default_str()->check(
      CLI::Range(1, 65536));
  add_kv_type_option(bench, o->kv_type);
  add_mmap_flag(bench, o->mmap);
  bench.add_option("--bandwidth-mib", o->bandwidth_mib,
                   "buffer read to measure memory bandwidth [default: twice the largest cache, at least 512]")
      ->check(CLI::Range(1, 1 << 16));
  auto* threads = bench.get_option("--threads");
  add_cluster_run_options(bench, o->cluster);
  bench.callback([o, &bench, threads] {
    if (!o->model.empty()) reject_cluster_flags_alone(bench, o->cluster);
    if (!o->model.empty() && o->cluster.enabled()) {
      int per_worker = 0;  // all its cores
      if (threads->count()) {
        if (o->threads.size() != 1) throw UsageError("-t: with --nodes/--hostfile give one thread count (per worker)");
        per_worker = o->threads[0];
      }
      const ClusterBenchRequest request{o->model, o->kv_type, o->prompt, o->gen, o->batch, per_worker};
      if (o->cluster.mpi()) bench_on_mpi(o->cluster, request);
      else bench_on_cluster(o->cluster, request);
    } else if (o->cluster.enabled()) {
      throw Error("bench: --nodes/--hostfile need -m MODEL");
    } else if (!o->model.empty()) {
      bench_model(*o);
    } else if (bench.get_subcommands().empty()) {
      throw Error("bench: give -m MODEL, or `bench kernels` / `bench comm`");
    }
  });
}

}  // namespace shardlm::cli
