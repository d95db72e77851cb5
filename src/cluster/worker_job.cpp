#include "cluster/worker_job.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>
#include <string_view>
#include <thread>

#include "cluster/control_pump.h"
#include "cluster/heartbeat.h"
#include "cluster/job_wire.h"
#include "cluster/keepalive.h"
#include "cluster/protocol.h"
#include "cluster/shard.h"
#include "cluster/shard_cache.h"
#include "cluster/worker.h"
#include "comm/communicator.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/kv_type.h"
#include "gguf/gguf.h"
#include "net/port_range.h"
#include "parallel/distributed_session.h"

namespace shardlm::cluster {
namespace fs = std::filesystem;
using net::Fd;

std::string job_context_to_text(const JobContext& c) {
  return nlohmann::json{{"token", c.token},
                        {"cache_dir", c.cache_dir},
                        {"peer", c.peer},
                        {"daemon_port", c.daemon_port},
                        {"daemon_pid", c.daemon_pid},
                        {"cache_max_bytes", c.cache_max_bytes},
                        {"session_key", c.session_key},
                        {"frames_sent", c.frames_sent},
                        {"frames_received", c.frames_received}}
      .dump();
}

JobContext job_context_from_text(const std::string& text) {
  JobContext c;
  try {
    const auto j = nlohmann::json::parse(text);
    c.token = j.at("token").get<std::string>();
    c.cache_dir = j.at("cache_dir").get<std::string>();
    c.peer = j.at("peer").get<std::string>();
    c.daemon_port = j.at("daemon_port").get<int>();
    c.daemon_pid = j.at("daemon_pid").get<int>();
    c.cache_max_bytes = j.at("cache_max_bytes").get<uint64_t>();
    c.session_key = j.at("session_key").get<net::SessionKey>();
    c.frames_sent = j.at("frames_sent").get<uint64_t>();
    c.frames_received = j.at("frames_received").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("worker job: malformed context from the daemon: {}", e.what()));
  }
  return c;
}

namespace {

struct JobSpec {
  int rank = 0, size = 0;
  std::string comm_address;
  net::PortRange comm_ports;  // where this worker's job links listen
  parallel::Plan plan;
  parallel::DistributedSessionOptions runtime;
  double peer_timeout_s = kDefaultPeerTimeoutSeconds;
  std::string mode, local_path, key;
  std::string fingerprint;  // of the coordinator's model, for a local copy (older coordinators send none)
  uint64_t file_size = 0, shard_bytes = 0;
  int64_t memory_needed = 0;
};

JobSpec parse_job(const nlohmann::json& j, const std::string& who) {
  JobSpec s;
  try {
    s.rank = j.at("rank").get<int>();
    s.size = j.at("size").get<int>();
    s.comm_address = j.at("comm_address").get<std::string>();
    s.comm_ports = net::parse_port_range(j.value("comm_ports", ""));
    s.plan = plan_from_json(j.at("plan"), who);
    const auto& o = j.at("options");
    s.runtime.n_ctx = o.at("n_ctx").get<int64_t>();
    s.runtime.n_batch = o.at("n_batch").get<int64_t>();
    s.runtime.n_seq = o.value("n_seq", int64_t(1));
    s.runtime.batch_invariant = o.value("batch_invariant", false);
    const auto kv_type = kv_type_from_name(o.at("kv_type").get<std::string>());
    if (!kv_type) throw Error("kv_type is not f32 or f16");
    s.runtime.kv_type = *kv_type;
    s.runtime.threads = o.at("threads").get<int>();
    s.peer_timeout_s = o.value("peer_timeout", kDefaultPeerTimeoutSeconds);
    const auto& m = j.at("model");
    s.mode = m.at("mode").get<std::string>();
    s.local_path = m.value("path", "");
    s.key = m.value("key", "");
    s.fingerprint = m.value("fingerprint", "");
    s.file_size = m.at("file_size").get<uint64_t>();
    s.shard_bytes = m.at("shard_bytes").get<uint64_t>();
    s.memory_needed = j.at("memory_needed").get<int64_t>();
  } catch (const std::exception& e) {  // nlohmann's, or the port range's Error
    throw Error(fmt::format("{}: malformed Job message: {}", who, e.what()));
  }
  if (s.size < 2 || s.size != s.plan.size() + 1 || s.rank < 1 || s.rank >= s.size)
    throw Error(fmt::format("{}: Job rank {} of {} does not match a plan of {} ranks", who, s.rank, s.size,
                            s.plan.size()));
  if (s.runtime.n_ctx < 1 || s.runtime.n_ctx > (int64_t(1) << 24) || s.runtime.n_batch < 1 ||
      s.runtime.n_batch > 65536 || s.runtime.n_seq < 1 || s.runtime.n_seq > 1024 || s.runtime.threads < 0 || s.runtime.threads > 1024 ||
      !(s.peer_timeout_s >= 0.1 && s.peer_timeout_s <= 3600))
    throw Error(fmt::format("{}: Job options out of range", who));
  if (s.mode != "stream" && s.mode != "local") throw Error(fmt::format("{}: unknown model mode '{}'", who, s.mode));
  if (s.key.size() != 64 || s.key.find_first_not_of("0123456789abcdef") != std::string::npos) {
    if (s.mode == "stream") throw Error(fmt::format("{}: bad shard key '{}'", who, s.key));
  }
  return s;
}

// Driver of the workers' runtime: runs each step the coordinator sends and
// answers it with the sampled tokens (an empty Token frame for a mark).
// Returns where this rank's time went, per period between marks.
std::vector<RequestStats> drive(Channel& ch, ControlPump& pump, parallel::DistributedSession& session) {
  std::vector<RequestStats> periods;
  // Test hook: slows every step down so a test can stop or kill a worker mid-way.
  const char* delay = std::getenv("SHARDLM_WORKER_TOKEN_DELAY_MS");
  const auto pause = std::chrono::milliseconds(delay ? std::atoi(delay) : 0);
  for (;;) {
    const Message m = pump.next_request();
    const auto step = parallel::StepMessage::decode(m.payload, session.n_slots(), session.max_step_entries(),
                                                    session.n_ctx(), session.n_vocab(), ch.peer());
    if (step.kind == parallel::StepKind::Logits)
      throw Error(fmt::format("{}: a logits step is not served to a coordinator", ch.peer()));
    if (step.kind == parallel::StepKind::Shutdown) {
      session.run(step);
      return periods;
    }
    const auto tokens = session.run(step);
    if (step.kind == parallel::StepKind::Mark) {
      if (periods.size() < kMaxReportedRequests) periods.push_back({session.stats()});
      session.reset_stats();
    }
    if (pause.count() > 0 && !tokens.empty()) std::this_thread::sleep_for(pause);
    const auto bytes = parallel::encode_tokens(tokens);
    ch.send(MsgType::Token, bytes.data(), bytes.size(), after_seconds(60));
  }
}

// The other workers: run the driver's steps, a stats period per mark, until it shuts down.
std::vector<RequestStats> follow(parallel::DistributedSession& session) {
  std::vector<RequestStats> periods;
  while (session.serve()) {
    if (periods.size() < kMaxReportedRequests) periods.push_back({session.stats()});
    session.reset_stats();
  }
  return periods;
}

// Where the job's slices come from: the worker's own copy, the cache, or the coordinator.
fs::path obtain_shard(Channel& ch, const JobSpec& job, const JobContext& ctx, fs::path& temp_dir, fs::path& part) {
  if (job.mode == "local") return job.local_path;
  const bool cached = !ctx.cache_dir.empty();
  const fs::path dir = cached ? fs::path(ctx.cache_dir)
                              : (temp_dir = job_temp_dir(::getpid(), ctx.daemon_port));
  fs::create_directories(dir);
  const fs::path shard_path = dir / (job.key + ".gguf");
  if (cached && cached_shard_intact(shard_path, job.file_size)) {
    spdlog::info("worker: shard {} is cached, no transfer", shard_path.string());
    touch_cached_shard(shard_path);
    ch.send_json(MsgType::Status, {{"status", "have"}}, after_seconds(10));
    return shard_path;
  }
  if (cached && fs::exists(shard_path))
    spdlog::warn("worker: cached shard {} has changed since it was stored; fetching it again", shard_path.string());
  ch.send_json(MsgType::Status, {{"status", "need"}}, after_seconds(10));
  part = shard_path.string() + ".part";
  ShardWriter w(part, job.file_size);
  for (;;) {
    Message m = ch.recv_live(job.peer_timeout_s);
    if (m.type == MsgType::DataEnd) break;
    if (m.type != MsgType::Data) throw Error(fmt::format("{}: unexpected message during the transfer", ch.peer()));
    w.write_records(m.payload, ch.peer());
    if (w.received() > job.shard_bytes)
      throw Error(fmt::format("{}: sent more than the announced {} bytes", ch.peer(), job.shard_bytes));
  }
  if (w.received() != job.shard_bytes)
    throw Error(fmt::format("{}: sent {} of the announced {} bytes", ch.peer(), w.received(), job.shard_bytes));
  w.close();
  fs::rename(part, shard_path);
  part.clear();
  if (cached) seal_cached_shard(shard_path);
  spdlog::info("worker: received {:.1f} MiB of slices", double(w.received()) / (1 << 20));
  if (cached && ctx.cache_max_bytes > 0) evict_cached_shards(dir, ctx.cache_max_bytes, shard_path);
  return shard_path;
}

// Test hook: a long setup (before saying ready, and again before loading the
// slices), during which a test can stop the worker or check that it beats.
void slow_setup_for_tests() {
  if (const char* delay = std::getenv("SHARDLM_WORKER_SETUP_DELAY_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
}

// The job's slices, checked against the memory left and the coordinator's model size.
std::unique_ptr<gguf::File> load_shard(Channel& ch, const JobSpec& job, const JobContext& ctx, const std::string& host,
                                       fs::path& temp_dir, fs::path& part) {
  const int64_t available = memory_available_bytes();
  if (job.memory_needed > available)
    throw Error(fmt::format("worker {}: not enough memory: its slices and KV cache need {:.1f} MiB, MemAvailable is "
                            "{:.1f} MiB",
                            host, double(job.memory_needed) / (1 << 20), double(available) / (1 << 20)));
  const fs::path shard_path = obtain_shard(ch, job, ctx, temp_dir, part);
  auto file = gguf::File::open(shard_path.string());
  if (file->file_size() != job.file_size)
    throw Error(fmt::format("worker {}: {} has {} bytes, the coordinator's model {}", host, shard_path.string(),
                            file->file_size(), job.file_size));
  if (job.mode == "local" && !job.fingerprint.empty() && model_fingerprint(*file) != job.fingerprint)
    throw Error(fmt::format("worker {}: {} is not the coordinator's model: the same size, other bytes", host,
                            shard_path.string()));
  return file;
}

// The job's communicator (this worker is job.rank of the world, the
// coordinator rank 0); returns the workers' own, split off it.
std::shared_ptr<comm::Communicator> join_world(const JobSpec& job, const JobContext& ctx, Fd listener) {
  comm::ConnectOptions co;
  co.backend = "tcp";
  co.rank = job.rank;
  co.size = job.size;
  co.coordinator = job.comm_address;
  co.listen_fd = listener ? listener.release() : -1;
  co.token = ctx.token;
  co.cluster_id = "shardlm-job";
  // Liveness is the heartbeats' business (the control pump): a step may legitimately take long.
  co.timeouts.op = std::chrono::hours(24);
  co.timeouts.connect = std::chrono::hours(24);  // the coordinator may still be sending other workers their slices
  auto world = comm::Communicator::connect(co);
  keep_alive_all_connections(job.peer_timeout_s);
  return world->split(0, job.rank);
}

[[noreturn]] void give_up(const std::string& why) {
  spdlog::error("worker: job abandoned: {}", why);
  spdlog::default_logger()->flush();
  std::fflush(nullptr);
  // Other threads may be blocked in the comm layer for a peer that will never answer.
  ::_exit(3);
}

}  // namespace

constexpr std::string_view kJobDirPrefix = "shardlm-worker-";  // then the job's pid, '-', the daemon's port

fs::path job_temp_dir(int job_pid, int daemon_port) {
  return fs::temp_directory_path() / fmt::format("{}{}-{}", kJobDirPrefix, job_pid, daemon_port);
}

int remove_orphaned_job_dirs(int daemon_port) {
  const std::string_view prefix = kJobDirPrefix;
  const std::string suffix = fmt::format("-{}", daemon_port);
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix) || !name.ends_with(suffix) || name.size() <= prefix.size() + suffix.size()) continue;
    const std::string pid_text = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    // A live process of that number may be another daemon's job on the same
    // port in another network namespace: only a number no process has is orphaned.
    if (::kill(pid_t(std::stol(pid_text)), 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    if (fs::remove_all(entry.path(), ignored) > 0) {
      spdlog::info("worker: removed {} (left by a job process that no longer exists)", entry.path().string());
      ++removed;
    }
  }
  return removed;
}

int serve_job(int raw_fd, const JobContext& ctx) {
  const std::string host = host_name();
  fs::path temp_dir, part;
  std::unique_ptr<Channel> ch;
  int status = 1;
  const auto report = [&](const std::string& message) {
    if (ch) try { ch->send_json(MsgType::Status, {{"status", "error"}, {"message", message}}, after_seconds(2)); } catch (...) {}
  };
  try {
    net::set_nonblocking(raw_fd);
    ch = std::make_unique<Channel>(
        Fd(raw_fd), ctx.peer,
        net::FrameAuth(ctx.session_key, net::Role::Acceptor, ctx.frames_sent, ctx.frames_received));
    const JobSpec job = parse_job(ch->expect_json(MsgType::Job, after_seconds(120)), ctx.peer);
    spdlog::info("worker: job as rank {} of {}, {} slices ({:.1f} MiB, {})", job.rank, job.size,
                 job.plan.ranks[size_t(job.rank - 1)].to_string(), double(job.shard_bytes) / (1 << 20), job.mode);
    // Setup (a transfer, loading the slices) may take long: the coordinator hears we are alive.
    auto setup_beats = std::make_unique<HeartbeatSender>(std::vector<Channel*>{ch.get()},
                                                         heartbeat_interval(job.peer_timeout_s));
    // Only ranks below the last take links from higher ranks. Taken before
    // the transfer: a range with no free port fails the job before gigabytes move.
    Fd comm_listener;
    if (job.rank < job.size - 1) {
      comm_listener = net::listen_in_range(job.comm_ports, "--comm-port");
      spdlog::info("worker: the job's links from other workers come to port {}", net::local_port(comm_listener.get()));
    }
    const auto file = load_shard(*ch, job, ctx, host, temp_dir, part);
    slow_setup_for_tests();
    ch->send_json(MsgType::Status, {{"status", "ready"}}, after_seconds(10));
    spdlog::info("worker: ready, joining the job's communicator");
    // From here on this thread reads nothing more from the coordinator: the
    // pump does (heartbeats both ways, an Abort, its silence), while we
    // connect and load too.
    auto pump = std::make_unique<ControlPump>(*ch, job.peer_timeout_s, give_up);
    setup_beats.reset();
    const auto workers = join_world(job, ctx, std::move(comm_listener));
    slow_setup_for_tests();
    parallel::DistributedSessionOptions ro = job.runtime;
    if (ro.threads == 0) ro.threads = usable_cpus();
    // As `serve` does on one machine: the job's memory is taken when it
    // starts (a node short of it fails the job now, not mid-generation under
    // load), steps do not fault in pages of positions written first, and
    // the first requests do not wait for kernel timings.
    ro.commit_kv_cache = true;
    ro.time_kernels_at_load = true;
    parallel::DistributedSession session(workers, job.plan, *file, ro);
    spdlog::info("worker: joined the job's communicator, model ready");
    const std::vector<RequestStats> per_request =
        workers->rank() == 0 ? drive(*ch, *pump, session) : follow(session);
    pump.reset();
    spdlog::info("worker: job done");
    nlohmann::json stats = nlohmann::json::array();
    for (const auto& s : per_request) stats.push_back(request_stats_to_json(s));
    ch->send_json(MsgType::Status, {{"status", "done"}, {"requests", stats}}, after_seconds(10));
    status = 0;
  } catch (const std::bad_alloc&) {
    const std::string msg = fmt::format("worker {}: out of memory (std::bad_alloc)", host);
    spdlog::error("{}", msg);
    report(msg);
  } catch (const std::exception& e) {
    spdlog::error("worker: job failed: {}", e.what());
    report(e.what());
  }
  std::error_code ec;
  if (!part.empty()) fs::remove(part, ec);  // an interrupted transfer is never mistaken for a cached shard
  if (!temp_dir.empty()) fs::remove_all(temp_dir, ec);
  return status;
}

}  // namespace shardlm::cluster
