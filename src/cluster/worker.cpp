#include "cluster/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cluster/protocol.h"
#include "cluster/shard_cache.h"
#include "cluster/worker_job.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/membw.h"
#include "core/thread_pool.h"
#include "parallel/kernel_rates.h"

extern char** environ;

namespace shardlm::cluster {
namespace fs = std::filesystem;
using net::Fd;

namespace {

constexpr double kHandshakeSeconds = 5;
constexpr double kJobWaitSeconds = 60;  // from the Info to the Job message
// A job whose coordinator was told it is done may still be exiting (unmapping
// its model): a coordinator that connects right after, as back-to-back runs
// and scripts do, waits that out instead of being told the worker is busy.
constexpr auto kBusyGrace = std::chrono::seconds(1);
constexpr int kMaxConnections = 64;     // connections being handled at once

void write_port_file(const std::string& path, uint16_t port) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(fmt::format("--port-file: cannot write {}: {}", path, ec.message()));
}

// A copy of `fd` numbered above the ones posix_spawn's dup2s write to.
Fd high_copy(int fd) {
  Fd copy(::fcntl(fd, F_DUPFD_CLOEXEC, 10));
  if (!copy) throw Error(fmt::format("worker: fcntl(F_DUPFD): {}", std::strerror(errno)));
  return copy;
}

// Spawns `shardlm worker-job` with the connection as fd 3 and its context on fd 4.
pid_t spawn_job_process(int conn_fd, const JobContext& ctx, const std::string& log_level) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw Error(fmt::format("worker: pipe: {}", std::strerror(errno)));
  Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  const std::string text = job_context_to_text(ctx);
  if (text.size() > 60000) throw Error("worker: job context too large for a pipe");
  if (::write(write_end.get(), text.data(), text.size()) != ssize_t(text.size()))
    throw Error(fmt::format("worker: writing the job context: {}", std::strerror(errno)));
  write_end.reset();
  Fd conn = high_copy(conn_fd), context = high_copy(read_end.get());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, conn.get(), 3);
  posix_spawn_file_actions_adddup2(&actions, context.get(), 4);
  std::vector<std::string> args = {"shardlm", "--log-level", log_level, "worker-job"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(fmt::format("worker: cannot start the job process: {}", std::strerror(rc)));
  return pid;
}

// Waits until `fd` has data (true) or was closed, or the deadline or `stop` comes (false).
bool wait_for_data(int fd, Deadline deadline, const std::function<bool()>& stop) {
  while (SteadyClock::now() < deadline && !stop()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char byte;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK);
    if (n > 0) return true;
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) return false;
  }
  return false;
}

}  // namespace

int64_t memory_available_bytes() {
  if (const char* pretend = std::getenv("SHARDLM_WORKER_MEM_MIB")) return std::atoll(pretend) << 20;
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

Worker::Worker(WorkerOptions options) : opt_(std::move(options)) {
  auto where = net::parse_host_port(opt_.listen, "--listen");
  listener_ = net::listen_on(where);
  port_ = net::local_port(listener_.get());
  remove_orphaned_job_dirs(port_);
  if (!opt_.cache_dir.empty()) {
    std::error_code ec;
    fs::create_directories(opt_.cache_dir, ec);
    if (ec) throw Error(fmt::format("--cache-dir: cannot create {}: {}", opt_.cache_dir, ec.message()));
  }
  info_.cores = usable_cpus();
  info_.bandwidth_gbs = opt_.probe_bytes ? measure_read_bandwidth(opt_.probe_bytes, nullptr, 2) : 0;
  info_.host = host_name();
  info_.cpu = cpu_summary();
  if (opt_.probe_bytes) {
    // The matrix the kernel rates are measured on: at most the bandwidth probe's size.
    constexpr size_t kRateMatrixBytes = size_t(32) << 20;
    ThreadPool pool(info_.cores);
    info_.kernel_rates = parallel::measure_kernel_rates(parallel::common_weight_types(), info_.cores > 1 ? &pool : nullptr,
                                                        std::min(opt_.probe_bytes, kRateMatrixBytes));
    info_.token_costs = parallel::measure_token_costs();
  }
  if (!opt_.port_file.empty()) write_port_file(opt_.port_file, port_);
  spdlog::info("worker: listening on {}:{}; {} cores, MemAvailable {:.0f} MiB, read bandwidth {:.1f} GB/s",
               where.host.empty() ? "*" : where.host, port_, info_.cores,
               double(memory_available_bytes()) / (1 << 20), info_.bandwidth_gbs);
}

Worker::~Worker() = default;

void Worker::serve() {
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (opt_.max_jobs >= 0 && jobs_done_ >= opt_.max_jobs) break;
    }
    Fd c = net::accept_until(listener_.get(), after_seconds(0.2));
    if (!c) continue;
    std::lock_guard lock(mu_);
    if (connections_ >= kMaxConnections) {
      spdlog::warn("worker: {} connections being handled; closing one from {}", connections_,
                   net::peer_address(c.get()));
      continue;
    }
    ++connections_;
    std::thread([this, fd = std::make_shared<Fd>(std::move(c))] {
      handle_connection(std::move(*fd));
      std::lock_guard lock(mu_);
      --connections_;
      cv_.notify_all();
    }).detach();
  }
  std::unique_lock lock(mu_);
  stopping_ = true;
  cv_.notify_all();
  cv_.wait(lock, [this] { return connections_ == 0; });
}

std::string Worker::busy_text() {
  return fmt::format("worker busy (serving job from {} since {})", busy_->coordinator, utc_time_text(busy_->since));
}

nlohmann::json Worker::info_json() {
  nlohmann::json cached = nlohmann::json::array();
  if (!opt_.cache_dir.empty())
    for (const auto& s : list_cached_shards(opt_.cache_dir)) cached.push_back({{"key", s.key}, {"bytes", s.bytes}});
  nlohmann::json j = {{"memory_bytes", memory_available_bytes()},
                      {"cores", info_.cores},
                      {"bandwidth_gbs", info_.bandwidth_gbs},
                      {"host", info_.host},
                      {"cpu", info_.cpu},
                      {"kernel_rates", info_.kernel_rates.to_json()},
                      {"token_costs", info_.token_costs.to_json()},
                      {"version", kVersion},
                      {"protocol", kProtocol},
                      {"cached", cached},
                      {"cache_max_bytes", opt_.cache_max_bytes}};
  std::lock_guard lock(mu_);
  j["state"] = busy_ ? "busy" : "idle";
  if (busy_) {
    j["serving"] = busy_->coordinator;
    j["since"] = utc_time_text(busy_->since);
  }
  return j;
}

void Worker::handle_connection(Fd fd) {
  const std::string address = net::peer_address(fd.get());
  const std::string peer = "coordinator " + address;
  net::SessionKey key;
  try {
    net::set_nonblocking(fd.get());
    key = authenticate_control(fd.get(), net::Role::Acceptor, opt_.token, after_seconds(kHandshakeSeconds), peer);
  } catch (const Error& e) {
    spdlog::warn("worker: refused a connection: {}", e.what());
    return;
  }
  try {
    Channel ch(std::move(fd), peer, net::FrameAuth(key, net::Role::Acceptor));
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, kBusyGrace, [this] { return !busy_ || stopping_; });
    }
    ch.send_json(MsgType::Info, info_json(), after_seconds(kHandshakeSeconds));
    const auto refuse_busy = [&] {
      std::string text;
      {
        std::lock_guard lock(mu_);
        if (!busy_) return false;
        text = busy_text();
      }
      spdlog::info("worker: told {}: {}", peer, text);
      ch.send_json(MsgType::Status, {{"status", "error"}, {"message", text}}, after_seconds(kHandshakeSeconds));
      return true;
    };
    if (refuse_busy()) return;
    const bool job_coming = wait_for_data(ch.fd(), after_seconds(kJobWaitSeconds), [this] {
      std::lock_guard lock(mu_);
      return stopping_;
    });
    if (!job_coming) {
      spdlog::debug("worker: {} left without a job", peer);
      return;
    }
    bool claimed = false;
    std::string text;
    {
      std::lock_guard lock(mu_);
      claimed = !busy_;
      if (claimed) busy_ = Busy{address, std::chrono::system_clock::now()};
      else text = busy_text();
    }
    if (!claimed) {
      ch.recv(after_seconds(kHandshakeSeconds));  // its Job: a Status error answers it
      ch.send_json(MsgType::Status, {{"status", "error"}, {"message", text}}, after_seconds(kHandshakeSeconds));
      return;
    }
    Fd conn(::fcntl(ch.fd(), F_DUPFD_CLOEXEC, 10));  // run_job reports a failed copy
    ch.close();  // the job process holds the only copy: its exit closes the connection
    run_job(std::move(conn), peer, ch.auth());
  } catch (const std::exception& e) {
    spdlog::warn("worker: {}: {}", peer, e.what());
  }
}

void Worker::run_job(Fd conn, const std::string& peer, const net::FrameAuth& auth) {
  JobContext ctx;
  ctx.session_key = auth.key();
  ctx.frames_sent = auth.sent();
  ctx.frames_received = auth.received();
  ctx.token = opt_.token;
  ctx.cache_dir = opt_.cache_dir;
  ctx.cache_max_bytes = opt_.cache_max_bytes;
  ctx.peer = peer;
  ctx.daemon_port = port_;
  ctx.daemon_pid = int(::getpid());
  pid_t pid = -1;
  try {
    pid = spawn_job_process(conn.get(), ctx, opt_.log_level);
  } catch (const Error& e) {
    spdlog::error("{}", e.what());
  }
  conn.reset();
  if (pid > 0) {
    spdlog::info("worker: job from {} runs in process {}", peer, pid);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) spdlog::warn("worker: job process {} was killed by signal {}", pid, WTERMSIG(status));
    std::error_code ignored;
    std::filesystem::remove_all(job_temp_dir(int(pid), port_), ignored);
  }
  std::lock_guard lock(mu_);
  busy_.reset();
  ++jobs_done_;
  cv_.notify_all();
  spdlog::info("worker: idle");
}

}  // namespace shardlm::cluster
