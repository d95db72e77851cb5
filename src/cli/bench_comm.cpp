// `shardlm bench comm`: nccl-tests style tables for the collectives. With
// --np N it starts N-1 more copies of this binary (internal --rank/--size/
// --coordinator flags) and is rank 0 itself; with --rank it joins a world;
// with --backend mpi the ranks come from mpirun. Rank 0 prints the table.
// --tune times every all-reduce candidate at each size instead and writes the
// fastest as the tuning table the communicator reads (comm/tuning.h).
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <filesystem>
#include <fstream>

#include <fmt/core.h>

#include "cli/commands.h"
#include "comm/communicator.h"
#include "comm/reduce.h"
#include "core/clock.h"
#include "net/socket.h"
#include "comm/tuning.h"
#include "core/error.h"

extern char** environ;

namespace shardlm::cli {
namespace {

using comm::Communicator;

struct CommBenchOptions {
  std::string backend = "tcp";
  int np = 2;
  int rank = -1, size = -1;
  std::string coordinator;
  std::string ops = "all_reduce";
  std::string min_bytes = "4", max_bytes = "256M";
  std::string dtype = "f32";
  std::string algo;  // empty: $SHARDLM_ALLREDUCE_ALGO or auto
  std::string token_file;
  int iters = 0;     // 0: by size
  int timeout_ms = 30000;
  int spin_us = -1;  // -1: the transport's default
  bool tune = false;
};

size_t parse_bytes(const std::string& text, const char* flag) {
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos);
  } catch (const std::exception&) {
    throw Error(fmt::format("{}: '{}' is not a size (e.g. 4, 16K, 256M)", flag, text));
  }
  std::string unit = text.substr(pos);
  if (unit == "K" || unit == "k") v <<= 10;
  else if (unit == "M" || unit == "m") v <<= 20;
  else if (unit == "G" || unit == "g") v <<= 30;
  else if (!unit.empty()) throw Error(fmt::format("{}: bad unit in '{}'", flag, text));
  return size_t(v);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string random_token() {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof b) != 1) throw Error("RAND_bytes failed");
  std::string t;
  for (unsigned char c : b) t += fmt::format("{:02x}", c);
  return t;
}

// Starts ranks 1..np-1 as copies of this binary joining rank 0 at `port`.
std::vector<pid_t> spawn_ranks(const CommBenchOptions& o, const std::string& coordinator) {
  std::vector<pid_t> pids;
  for (int r = 1; r < o.np; ++r) {
    std::vector<std::string> args = {"shardlm", "bench", "comm", "--backend", o.backend,
                                     "--rank", std::to_string(r), "--size", std::to_string(o.np),
                                     "--coordinator", coordinator, "--ops", o.ops,
                                     "--min-bytes", o.min_bytes, "--max-bytes", o.max_bytes,
                                     "--dtype", o.dtype, "--iters", std::to_string(o.iters),
                                     "--timeout-ms", std::to_string(o.timeout_ms),
                                     "--spin-us", std::to_string(o.spin_us)};
    if (!o.algo.empty()) args.insert(args.end(), {"--algo", o.algo});
    if (o.tune) args.push_back("--tune");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0)
      throw Error("bench comm: cannot start a rank (posix_spawn of /proc/self/exe failed)");
    pids.push_back(pid);
  }
  return pids;
}

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return double(n - 1) / n;  // all_gather, reduce_scatter
}

float test_value(int rank, size_t i) { return float(int(i % 7) + rank); }

void fill(std::vector<uint8_t>& buf, DType dt, size_t count, int rank, size_t offset = 0) {
  for (size_t i = 0; i < count; ++i) comm::store_elem(buf.data(), dt, i, test_value(rank, offset + i));
}

float at(const std::vector<uint8_t>& buf, DType dt, size_t i) { return comm::load_elem(buf.data(), dt, i); }

// CPU time of the calling thread, us: what an op costs a rank apart from
// waiting for a core, so algorithms compare on a loaded machine too.
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
}

float median(std::vector<float>& v) {
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct CommRow {
  double median_us = 0;
  double cpu_us_per_op = 0;
  int64_t wrong = 0;
  std::string algo;
};

// One op at one size: warm up, time every iteration, check the last result.
CommRow run_one(Communicator& c, const std::string& op, size_t bytes, DType dt, int iters_flag) {
  const int n = c.size(), me = c.rank();
  const size_t elem = comm::reduce_elem_bytes(dt);
  const size_t count = bytes / elem;  // all_reduce/broadcast: buffer; gather/scatter: total
  const size_t per_rank = count / size_t(n);
  int iters = iters_flag > 0 ? iters_flag
                             : int(std::clamp<size_t>((size_t(256) << 20) / std::max<size_t>(bytes, 1), 5, 1000));
  int warmup = std::max(2, iters / 10);
  std::vector<uint8_t> a(count * elem + elem), b(count * elem + elem), init(count * elem + elem);
  CommRow row;
  std::vector<float> times;
  // Nothing but the op between two timed ops, as in the raw exchange floor
  // and the OpenMPI bench: a reset of the input or a CPU-clock read there
  // delays this rank's next op, and its partner waits that out inside its
  // own timed op. So the timed all-reduces sum zeros (no reset needed, the
  // same arithmetic), CPU time is read around the whole loop, and the result
  // is checked on one op of real data after it.
  auto once = [&] {
    auto t0 = SteadyClock::now();
    if (op == "all_reduce") c.all_reduce(a.data(), count, dt);
    else if (op == "all_gather") c.all_gather(a.data(), b.data(), per_rank * elem);
    else if (op == "reduce_scatter") c.reduce_scatter(a.data(), b.data(), per_rank, dt);
    else if (op == "broadcast") c.broadcast(a.data(), count * elem, 0);
    else throw Error(fmt::format("--ops: unknown op '{}'", op));
    return float(seconds_since(t0) * 1e6);
  };
  if (op == "all_gather") fill(a, dt, per_rank, me, size_t(me) * per_rank);
  else fill(a, dt, count, me);
  std::memcpy(init.data(), a.data(), count * elem);
  if (op == "all_reduce") std::fill(a.begin(), a.end(), uint8_t(0));  // 0 in f32, f16 and bf16
  for (int i = 0; i < warmup; ++i) once();
  const double cpu0 = thread_cpu_us();
  for (int i = 0; i < iters; ++i) times.push_back(once());
  float cpu_per_op = float((thread_cpu_us() - cpu0) / iters);
  if (op == "all_reduce") {
    std::memcpy(a.data(), init.data(), count * elem);
    once();
  }
  // The slowest rank defines each iteration's time (and the CPU time).
  c.all_reduce(times.data(), times.size(), DType::F32, comm::ReduceOp::Max);
  c.all_reduce(&cpu_per_op, 1, DType::F32, comm::ReduceOp::Max);
  row.median_us = median(times);
  row.cpu_us_per_op = cpu_per_op;

  float base = float(n) * float(n - 1) / 2;  // sum over ranks of rank
  if (op == "all_reduce") {
    for (size_t i = 0; i < count; ++i) row.wrong += at(a, dt, i) != float(n) * float(i % 7) + base;
    row.algo = std::string(comm::algo_name(c.choose_all_reduce(count * elem)));
  } else if (op == "reduce_scatter") {
    for (size_t i = 0; i < per_rank; ++i)
      row.wrong += at(b, dt, i) != float(n) * float((size_t(me) * per_rank + i) % 7) + base;
    row.algo = per_rank * elem * size_t(n) < c.config().ring_from_bytes ? "direct" : "ring";
  } else if (op == "all_gather") {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < per_rank; ++i)
        row.wrong += at(b, dt, size_t(r) * per_rank + i) != test_value(r, size_t(r) * per_rank + i);
    row.algo = "direct";
  } else {
    for (size_t i = 0; i < count; ++i) row.wrong += at(a, dt, i) != test_value(0, i);
    row.algo = n > 2 && count * elem >= c.config().ring_from_bytes ? "scatter-ring" : "direct";
  }
  int64_t wrong = row.wrong;
  float wrong_f = float(wrong);
  c.all_reduce(&wrong_f, 1, DType::F32);
  row.wrong = int64_t(wrong_f);
  return row;
}

// The candidates --tune times at a size: the backend's own all-reduce, the
// latency algorithms while they can win, halving-doubling, ring and chain
// with four piece sizes
// (32 KiB: a 2-rank ring step of 128 KiB-1 MiB then runs as a pipeline of
// pieces instead of one message per step).
std::vector<comm::AllReduceChoice> tune_candidates(std::string_view backend, size_t bytes) {
  using comm::AllReduceAlgo;
  std::vector<comm::AllReduceChoice> out;
  if (backend != "tcp") out.push_back({AllReduceAlgo::Native, 0});
  if (bytes <= (size_t(1) << 20)) out.push_back({AllReduceAlgo::OneShot, 0});
  if (bytes <= (size_t(4) << 20)) out.push_back({AllReduceAlgo::RecursiveDoubling, 0});
  out.push_back({AllReduceAlgo::HalvingDoubling, 0});
  for (size_t chunk : {size_t(32) << 10, size_t(128) << 10, size_t(512) << 10, size_t(2) << 20}) {
    if (chunk > 2 * bytes) break;  // a larger piece would be the same run
    out.push_back({AllReduceAlgo::Ring, chunk});
    out.push_back({AllReduceAlgo::Chain, chunk});
  }
  return out;
}

// Median over a few iterations of the slowest rank, in us.
double time_choice(Communicator& c, size_t bytes, comm::AllReduceChoice choice) {
  const size_t count = bytes / 4;
  std::vector<float> buf(count, 1.0f);
  const int iters = int(std::clamp<size_t>((size_t(32) << 20) / bytes, 3, 40));
  std::vector<float> times;
  for (int i = -1; i < iters; ++i) {  // one warm-up
    auto t0 = SteadyClock::now();
    c.all_reduce(buf.data(), count, DType::F32, comm::ReduceOp::Sum, choice);
    float us = float(seconds_since(t0) * 1e6);
    if (i >= 0) times.push_back(us);
  }
  c.all_reduce(times.data(), times.size(), DType::F32, comm::ReduceOp::Max);
  return median(times);
}

// Replaces this backend's, group size's and link kind's rows of the tuning
// file with `rows`, keeping the others; written to a temporary file first.
void merge_into_tuning_file(const Communicator& c, const std::vector<comm::TuningRow>& rows, bool loopback) {
  const std::string path = comm::TuningTable::default_path();
  if (path.empty()) throw Error("bench comm --tune: no place for the tuning file (set $SHARDLM_COMM_TUNING or $HOME)");
  comm::TuningTable table;
  if (std::ifstream f(path); f) {  // keep the rows of other backends and group sizes
    std::stringstream text;
    text << f.rdbuf();
    try {
      const comm::TuningTable old = comm::TuningTable::parse(text.str(), path);
      for (const auto& r : old.rows())
        if (r.backend != c.backend() || r.ranks != c.size() || r.loopback != loopback) table.add(r);
    } catch (const Error& e) {
      fmt::print(stderr, "shardlm: warning: replacing the unreadable tuning file: {}\n", e.what());
    }
  }
  for (auto& r : rows) table.add(r);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << table.to_text();
    if (!out) throw Error(fmt::format("bench comm --tune: cannot write {}", tmp));
  }
  std::filesystem::rename(tmp, path);
  fmt::print("# wrote {}\n{}", path, table.to_text());
}

// Times every candidate at each size from lo to hi, keeps the fastest, and
// (rank 0) merges the rows into the tuning file.
void tune_all_reduce(Communicator& c, size_t lo, size_t hi) {
  lo = std::max<size_t>(lo, 4);
  const bool loopback = c.loopback_links();
  std::vector<comm::TuningRow> rows;
  if (c.rank() == 0)
    fmt::print("# shardlm bench comm --tune: backend {}, {} ranks, links {}; f32 sum, median us of the slowest rank\n",
               c.backend(), c.size(), loopback ? "loopback" : "other");
  comm::AllReduceChoice prev;
  for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
    // Three passes in alternating orders; a candidate's time is the middle
    // one of its three: a burst of load on a shared machine hurts one pass of
    // it, not its verdict, and a lucky pass does not win it either (four
    // ranks on two cores run a choice at one of two speeds, ~1.3-2x apart,
    // for a whole pass: best of two passes on the Xeon took tcp ring/512K
    // for 1 MiB after one fast pass, and the benchmark then ran it slow).
    const auto candidates = tune_candidates(c.backend(), bytes);
    std::vector<std::array<double, 3>> passes(candidates.size());
    for (int pass = 0; pass < 3; ++pass)
      for (size_t k = 0; k < candidates.size(); ++k) {
        const size_t i = pass % 2 == 0 ? k : candidates.size() - 1 - k;
        passes[i][size_t(pass)] = time_choice(c, bytes, candidates[i]);
      }
    std::vector<double> us(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      std::sort(passes[i].begin(), passes[i].end());
      us[i] = passes[i][1];
    }
    // Native within the margin: a tie at 16 KiB had put recursive doubling
    // in MPI's place and the previous-choice rule carried it to 128 KiB,
    // where MPI_Allreduce was 10-20 % faster in the benchmark (2 ranks).
    const comm::AllReduceChoice best = candidates[comm::pick_tuned(candidates, us, prev)];
    prev = best;
    std::string line = fmt::format("{:>10}", bytes);
    for (size_t i = 0; i < candidates.size(); ++i)
      line += fmt::format("  {}/{}K {:.1f}", comm::algo_name(candidates[i].algo), candidates[i].chunk_bytes >> 10, us[i]);
    if (c.rank() == 0) fmt::print("{}  -> {}/{}K\n", line, comm::algo_name(best.algo), best.chunk_bytes >> 10);
    // A row covers its size and up to halfway (geometrically) to the next one.
    const size_t up_to = bytes * 2 > hi ? SIZE_MAX : bytes + bytes / 2 - 1;
    auto same = [&](const comm::TuningRow& r) {
      return r.choice.algo == best.algo && r.choice.chunk_bytes == best.chunk_bytes;
    };
    if (!rows.empty() && same(rows.back())) rows.back().up_to_bytes = up_to;
    else rows.push_back({std::string(c.backend()), c.size(), loopback, up_to, best});
  }
  if (c.rank() == 0) merge_into_tuning_file(c, rows, loopback);
}

std::vector<std::string> checked_ops(const std::string& list) {
  auto ops = split_list(list);
  for (auto& op : ops)
    if (op != "all_reduce" && op != "all_gather" && op != "reduce_scatter" && op != "broadcast")
      throw Error(fmt::format("--ops: unknown op '{}' (all_reduce, all_gather, reduce_scatter, broadcast)", op));
  return ops;
}

// How this process joins: as the launcher (rank 0, spawning the other ranks
// into `children`), as a rank given on the command line, or under mpirun.
comm::ConnectOptions connect_options(const CommBenchOptions& o, std::vector<pid_t>& children) {
  comm::ConnectOptions co;
  co.backend = o.backend;
  co.timeouts.op = std::chrono::milliseconds(o.timeout_ms);
  co.cluster_id = "shardlm-bench";
  co.only_connecting_thread_calls = true;  // the bench is one thread
  if (o.spin_us >= 0) co.timeouts.spin = std::chrono::microseconds(o.spin_us);
  const bool launcher = o.rank < 0 && o.backend != "mpi";
  if (launcher) {
    if (o.np < 1 || o.np > 64) throw Error("--np: want 1..64 ranks");
    if (!std::getenv("SHARDLM_TOKEN")) setenv("SHARDLM_TOKEN", random_token().c_str(), 1);
    co.rank = 0;
    co.size = o.np;
    if (o.backend == "tcp") {
      net::Fd listener = net::listen_on({"127.0.0.1", 0});
      co.coordinator = fmt::format("127.0.0.1:{}", net::local_port(listener.get()));
      co.listen_fd = listener.release();
    } else {
      co.coordinator = fmt::format("shardlm-bench-{}", getpid());
    }
    children = spawn_ranks(o, co.coordinator);
  } else if (o.backend != "mpi") {
    co.rank = o.rank;
    co.size = o.size;
    co.coordinator = o.coordinator;
  }
  co.token = o.backend == "tcp" ? comm::load_token(o.token_file) : std::string();
  return co;
}

// The nccl-tests style table: every op at every size from lo to hi.
void print_op_table(Communicator& c, const CommBenchOptions& o, const comm::CommConfig& config,
                    const std::vector<std::string>& ops, DType dt, size_t lo, size_t hi) {
  if (c.rank() == 0) {
    fmt::print("# shardlm bench comm: backend {}, {} ranks, dtype {}, all_reduce algo {}\n", c.backend(), c.size(),
               o.dtype, algo_name(config.algo));
    fmt::print("# time = median over iterations of the slowest rank; busbw as nccl-tests; cpu = thread CPU time\n"
               "# per op over the timed iterations, slowest rank (spinning included, time waiting for a core not)\n");
    fmt::print("{:>12} {:>12} {:>5} {:>15} {:>12} {:>10} {:>11} {:>11} {:>7} {:>9}\n", "size(B)", "count", "type",
               "op", "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "cpu(us)");
  }
  const size_t elem = comm::reduce_elem_bytes(dt);
  for (auto& op : ops)
    for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
      size_t unit = op == "all_gather" || op == "reduce_scatter" ? elem * size_t(c.size()) : elem;
      size_t sz = std::max(unit, bytes / unit * unit);
      CommRow row = run_one(c, op, sz, dt, o.iters);
      if (c.rank() == 0) {
        double algbw = double(sz) / (row.median_us * 1e3);
        fmt::print("{:>12} {:>12} {:>5} {:>15} {:>12} {:>10.2f} {:>11.3f} {:>11.3f} {:>7} {:>9.2f}\n", sz, sz / elem,
                   o.dtype, op, row.algo, row.median_us, algbw, algbw * bus_factor(op, c.size()), row.wrong,
                   row.cpu_us_per_op);
        std::fflush(stdout);
      }
    }
}

// True when every spawned rank exited with status 0.
bool wait_for_children(const std::vector<pid_t>& children) {
  bool ok = true;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

void run_bench(const CommBenchOptions& o) {
  auto dt = dtype_from_name(o.dtype);
  if (!dt || (*dt != DType::F32 && *dt != DType::F16 && *dt != DType::BF16))
    throw Error(fmt::format("--dtype: '{}' (want f32, f16 or bf16)", o.dtype));
  size_t lo = parse_bytes(o.min_bytes, "--min-bytes"), hi = parse_bytes(o.max_bytes, "--max-bytes");
  if (lo == 0 || hi < lo) throw Error("--min-bytes must be > 0 and <= --max-bytes");
  const auto ops = checked_ops(o.ops);

  std::vector<pid_t> children;
  const comm::ConnectOptions co = connect_options(o, children);
  comm::CommConfig config = comm::CommConfig::from_env();
  if (!o.algo.empty()) {
    setenv("SHARDLM_ALLREDUCE_ALGO", o.algo.c_str(), 1);
    config = comm::CommConfig::from_env();
  }
  std::string error;
  try {
    auto c = Communicator::connect(co, config);
    if (o.tune) tune_all_reduce(*c, lo, hi);
    else print_op_table(*c, o, config, ops, *dt, lo, hi);
  } catch (const Error& e) {
    error = e.what();
  }
  const bool children_ok = wait_for_children(children);
  if (!error.empty()) throw Error(error);
  if (!children_ok) throw Error("bench comm: a rank failed (see its error above)");
}

}  // namespace

void add_bench_comm(CLI::App& bench) {
  auto opts = std::make_shared<CommBenchOptions>();
  auto* cmd = bench.add_subcommand("comm", "collective benchmarks (nccl-tests style table)");
  cmd->add_option("--backend", opts->backend, "tcp|shm|mpi")->capture_default_str();
  cmd->add_option("--np", opts->np, "start this many local ranks")->capture_default_str();
  cmd->add_option("--ops", opts->ops, "all_reduce,all_gather,reduce_scatter,broadcast")->capture_default_str();
  cmd->add_option("--min-bytes", opts->min_bytes, "smallest size (4, 16K, 1M ...)")->capture_default_str();
  cmd->add_option("--max-bytes", opts->max_bytes, "largest size")->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "f32|f16|bf16")->capture_default_str();
  cmd->add_option("--algo", opts->algo, "all_reduce algorithm: auto|oneshot|recdbl|ring|chain|halving|native");
  // mpirun claims --tune for itself: under it, say --autotune.
  cmd->add_flag("--tune,--autotune", opts->tune,
                "time every all_reduce algorithm and piece size from --min-bytes to --max-bytes and write "
                "the fastest to the tuning file ($SHARDLM_COMM_TUNING, else ~/.cache/shardlm/comm-tuning.txt)");
  cmd->add_option("--iters", opts->iters, "timed iterations per size (0: by size)")->capture_default_str();
  cmd->add_option("--timeout-ms", opts->timeout_ms, "per-operation timeout")->capture_default_str();
  cmd->add_option("--spin-us", opts->spin_us, "busy-poll this long before sleeping (-1: default)");
  cmd->add_option("--token-file", opts->token_file, "shared token (else $SHARDLM_TOKEN)");
  cmd->add_option("--rank", opts->rank, "join as this rank (with --size, --coordinator)");
  cmd->add_option("--size", opts->size, "world size when joining");
  cmd->add_option("--coordinator", opts->coordinator, "rank 0's host:port when joining");
  cmd->callback([opts] { run_bench(*opts); });
}

}  // namespace shardlm::cli
