#include "cluster/mpi_job.h"

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>

#include "cluster/mpi_weights.h"
#include "cluster/shard.h"
#include "cluster/worker.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/membw.h"
#include "core/thread_pool.h"
#include "parallel/kernel_rates.h"
#include "parallel/token_costs.h"

namespace shardlm::cluster {
namespace {

// What one rank tells the others; fixed size so one all_gather carries it.
constexpr size_t kDescriptionBytes = 16 << 10;
constexpr size_t kProbeBytes = size_t(64) << 20;
constexpr size_t kRateMatrixBytes = size_t(16) << 20;

// OpenMPI binds each rank it starts to one core (two ranks or fewer) or one
// socket unless told otherwise, and a rank's threads inherit that: one rank on
// a 2-core host decoded at 14 tok/s bound, 38 unbound. A binding the user
// named (`--bind-to`, which OpenMPI passes on in the environment) is kept; a
// default one narrower than the rank's share of the host is released before
// any thread starts. Slurm's bindings are allocations, and kept.
void release_default_binding() {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("OMPI_MCA_hwloc_base_binding_policy")) return;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int local_ranks = local ? std::max(1, std::atoi(local)) : 1;
  const int host_cpus = int(std::max(1u, std::thread::hardware_concurrency()));
  const int bound = usable_cpus();
  if (bound >= host_cpus / local_ranks) return;
  cpu_set_t any;
  CPU_ZERO(&any);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &any);  // the kernel keeps the cpuset's
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const auto level = rank && std::strcmp(rank, "0") == 0 ? spdlog::level::info : spdlog::level::debug;
  if (sched_setaffinity(0, sizeof any, &any) != 0) {
    spdlog::warn("mpi: cannot release mpirun's binding of this rank to {} CPU(s): {}", bound, std::strerror(errno));
    return;
  }
  spdlog::log(level, "mpi: mpirun bound this rank to {} CPU(s) by default; released to {} for its threads "
              "(mpirun --bind-to chooses a binding)", bound, usable_cpus());
}

// This rank: {"host", "error"} or {"host", "memory_bytes", "cores", "usable_cpus", "bandwidth_gbs",
// "kernel_rates", "token_costs"}; cores are the host's, usable_cpus this rank's.
// Measured by all ranks at once, so ranks sharing a host see their share of it.
nlohmann::json describe_self(const gguf::File* file, const std::string& error) {
  nlohmann::json j = {{"host", host_name()}};
  if (!error.empty()) {
    j["error"] = error;
    return j;
  }
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  j["memory_bytes"] = memory_available_bytes();
  j["cores"] = cores;
  j["usable_cpus"] = usable_cpus();
  j["bandwidth_gbs"] = measure_read_bandwidth(kProbeBytes, nullptr, 2);
  // Rates of weights streamed from memory, unless the whole model fits in the cache.
  const size_t matrix = std::min(parallel::streamed_matrix_bytes(kRateMatrixBytes), size_t(file->file_size()));
  j["kernel_rates"] = parallel::measure_kernel_rates(parallel::matmul_weight_types(*file), nullptr, matrix).to_json();
  j["token_costs"] = parallel::measure_token_costs().to_json();
  return j;
}

std::vector<nlohmann::json> all_gather_json(comm::Communicator& world, const nlohmann::json& mine) {
  std::string text = mine.dump();
  if (text.size() >= kDescriptionBytes) throw Error("mpi: this rank's description is too long");
  text.resize(kDescriptionBytes, '\0');
  std::string all(kDescriptionBytes * size_t(world.size()), '\0');
  world.all_gather(text.data(), all.data(), kDescriptionBytes);
  std::vector<nlohmann::json> out;
  for (int r = 0; r < world.size(); ++r) {
    const char* at = all.data() + size_t(r) * kDescriptionBytes;
    out.push_back(nlohmann::json::parse(std::string(at, strnlen(at, kDescriptionBytes))));
  }
  return out;
}

// What every rank must have been started with alike: each computes the plan
// and takes part in the weights' distribution on its own, so ranks started
// with other flags waited for one another forever (or printed another
// layout's text).
nlohmann::json settings_of(const MpiJobOptions& o) {
  const parallel::PlanRequest& p = o.plan;
  return {{"--tp", p.tp},
          {"--ep", p.ep},
          {"--pp", p.pp},
          {"--layers", p.layers},
          {"--ctx", p.n_ctx},
          {"sequences", p.n_seq},
          {"--kv-type", std::string(dtype_name(p.kv_type))},
          {"--wire-type", p.wire_type ? std::string(dtype_name(*p.wire_type)) : "by link speed"},
          {"--balance-margin", p.balance_margin},
          {"--distribute-weights", o.distribute_weights},
          {"--batch-invariant", o.runtime.batch_invariant}};
}

// Throws, on every rank alike, naming the first rank whose settings differ from rank 0's.
void check_same_settings(comm::Communicator& world, const MpiJobOptions& o) {
  const auto all = all_gather_json(world, settings_of(o));
  for (size_t r = 1; r < all.size(); ++r)
    for (const auto& [flag, value] : all[0].items())
      if (all[r].value(flag, nlohmann::json()) != value)
        throw Error(fmt::format("mpi rank {} was started with {} {}, rank 0 with {}: every rank needs the same flags", r,
                                flag, all[r].value(flag, nlohmann::json()).dump(), value.dump()));
}

// The planner's nodes: one per rank, named by rank and host. Ranks on one
// host split its memory and cores, reach each other over local links, and
// are described by the host's first rank (the same hardware: one noisy
// measurement each would split layers unevenly, and differently per launch),
// except that each rank has at most the CPUs its binding allows.
std::vector<parallel::NodeSpec> nodes_of(const std::vector<nlohmann::json>& described) {
  std::map<std::string, int> ranks_on_host;
  std::map<std::string, size_t> first_on_host;
  for (size_t r = 0; r < described.size(); ++r) {
    const auto host = described[r].at("host").get<std::string>();
    ++ranks_on_host[host];
    first_on_host.emplace(host, r);
  }
  const bool one_host = ranks_on_host.size() == 1;
  std::vector<parallel::NodeSpec> nodes;
  for (size_t r = 0; r < described.size(); ++r) {
    const std::string host = described[r].at("host").get<std::string>();
    const auto& d = described[first_on_host[host]];
    const int sharing = ranks_on_host[host];
    parallel::NodeSpec n = parallel::default_node(one_host ? "127.0.0.1" : host);
    n.name = fmt::format("rank {} ({})", r, host);
    n.memory_bytes = d.at("memory_bytes").get<int64_t>() / sharing;
    n.cores = std::max(1, std::min(described[r].at("usable_cpus").get<int>(), d.at("cores").get<int>() / sharing));
    if (const double bw = d.at("bandwidth_gbs").get<double>(); bw > 0) n.memory_bandwidth_gbs = bw;
    n.kernel_rates = parallel::KernelRates::from_json(d.at("kernel_rates"), n.name);
    n.token_costs = parallel::TokenCosts::from_json(d.at("token_costs"), n.name);
    nodes.push_back(std::move(n));
  }
  return nodes;
}

// Runs `step`, whose errors every rank reaches alike (their inputs were
// all-gathered or compared first): rank 0 prints the one line, the other
// ranks exit with the same status quietly (mpirun showed it once per rank).
void agreed(int rank, const std::function<void()>& step) {
  try {
    step();
  } catch (const parallel::PlanRequestError& e) {
    if (rank != 0) throw ReportedElsewhere(e.what(), 2);
    throw;
  } catch (const Error& e) {
    if (rank != 0) throw ReportedElsewhere(e.what(), 1);
    throw;
  }
}

}  // namespace

bool started_by_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

MpiJob::MpiJob(const std::string& model_path, MpiJobOptions options) {
  release_default_binding();
  comm::ConnectOptions c;
  c.backend = "mpi";
  c.timeouts.op = std::chrono::milliseconds(int64_t(options.op_timeout_seconds * 1e3));
  c.only_connecting_thread_calls = options.only_this_thread_calls;
  world_ = comm::Communicator::connect(c);
  world_rank_ = world_->rank();

  agreed(world_rank_, [&] { check_same_settings(*world_, options); });
  std::string error;
  SliceStore store;
  if (options.distribute_weights) {
    store = slice_store(options.cache_dir);
    if (!store.keep) temp_dir_ = store.dir.string();
    file_ = share_model_header(*world_, model_path, store);
  } else {
    try {
      file_ = gguf::File::open(model_path);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  nlohmann::json self = describe_self(file_.get(), error);
  // Each rank opened its own copy: they must be one model (distributed weights come from rank 0's).
  if (file_ && !options.distribute_weights) {
    self["model"] = model_fingerprint(*file_);
    self["model_path"] = model_path;
  }
  const auto described = all_gather_json(*world_, self);
  agreed(world_rank_, [&] {
    for (size_t r = 0; r < described.size(); ++r) {
      hosts_.push_back(described[r].at("host").get<std::string>());
      if (described[r].contains("error"))
        throw Error(fmt::format("mpi rank {} on {}: {}", r, hosts_.back(), described[r].at("error").get<std::string>()));
    }
    for (size_t r = 1; r < described.size(); ++r)
      if (described[r].value("model", "") != described[0].value("model", ""))
        throw Error(fmt::format("mpi rank {} on {}: its model {} is not rank 0's {} (other bytes)", r, hosts_[r],
                                described[r].value("model_path", ""), described[0].value("model_path", "")));
    plan_ = parallel::make_plan(*file_, nodes_of(described), options.plan);
  });
  if (options.distribute_weights)
    if (auto slices = distribute_slices(*world_, *file_, plan_, store)) file_ = std::move(slices);
  const bool mine = world_rank_ < plan_.size();
  auto members = world_->split(mine ? 0 : -1, world_rank_);
  if (!mine) {
    if (world_rank_ == plan_.size()) spdlog::warn("mpi: the plan uses {} of {} ranks; the rest wait", plan_.size(), world_size());
    return;
  }
  if (options.runtime.threads <= 0) options.runtime.threads = plan_.nodes[size_t(world_rank_)].cores;
  else if (options.runtime.threads > usable_cpus())
    spdlog::warn("mpi rank {}: -t {} on the {} CPU(s) its binding allows; mpirun --bind-to none or --map-by "
                 "...:PE={} gives it more", world_rank_, options.runtime.threads, usable_cpus(), options.runtime.threads);
  session_ = std::make_unique<parallel::DistributedSession>(members, plan_, *file_, options.runtime);
}

MpiJob::~MpiJob() {
  session_.reset();
  file_.reset();
  std::error_code ignored;
  if (!temp_dir_.empty()) std::filesystem::remove_all(temp_dir_, ignored);
}

void MpiJob::finish() {
  if (!session_) return;
  if (world_rank_ == 0) session_->shutdown();
  else session_->serve();
}

}  // namespace shardlm::cluster
