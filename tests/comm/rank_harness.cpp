#include "rank_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "net/socket.h"

namespace shardlm::comm::testing {
namespace {

std::string read_fd(int fd) {
  std::string out;
  char buf[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  return out;
}

int temp_file() {
  char path[] = "/tmp/shardlm-comm-test-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  unlink(path);
  return fd;
}

[[noreturn]] void child(int rank, int n, const Body& body, const RunOptions& o, int listen_fd,
                        uint16_t port, int out_fd, int log_fd) {
  dup2(log_fd, 1);  // spdlog's default sink is stdout
  dup2(log_fd, 2);
  auto start = std::chrono::steady_clock::now();
  int code = 0;
  std::string text;
  try {
    ConnectOptions c;
    c.rank = rank;
    c.size = n;
    c.coordinator = fmt::format("127.0.0.1:{}", port);
    c.listen_fd = rank == 0 ? listen_fd : -1;
    if (rank != 0 && listen_fd >= 0) ::close(listen_fd);
    c.token = o.token(rank);
    c.cluster_id = "comm-tests";
    c.timeouts.op = o.op_timeout;
    c.timeouts.connect = o.connect_timeout;
    auto comm = Communicator::connect(c, o.config);
    text = body(*comm);
  } catch (const std::exception& e) {
    code = 1;
    text = e.what();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string record = fmt::format("{:.6f}\n{}", secs, text);
  (void)!::write(out_fd, record.data(), record.size());
  std::fflush(stderr);
  _exit(code);
}

}  // namespace

std::vector<RankOutcome> run_ranks(int n, const Body& body, const RunOptions& o) {
  net::Fd listener = net::listen_on(net::HostPort{"127.0.0.1", 0});
  uint16_t port = net::local_port(listener.get());
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  std::vector<int> outs(static_cast<size_t>(n)), logs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    outs[size_t(r)] = temp_file();
    logs[size_t(r)] = temp_file();
  }
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    if (r == 1 && o.before_others) o.before_others(port);
    pid_t pid = fork();
    if (pid == 0) child(r, n, body, o, listener.get(), port, outs[size_t(r)], logs[size_t(r)]);
    pids[size_t(r)] = pid;
  }
  listener.reset();

  std::vector<RankOutcome> result(static_cast<size_t>(n));
  std::vector<bool> reaped(static_cast<size_t>(n), false);
  auto give_up = std::chrono::steady_clock::now() + o.give_up;
  auto is_hanger = [&](int r) {
    for (int h : o.may_hang)
      if (h == r) return true;
    return false;
  };
  for (int left = n; left > 0;) {
    bool progress = false;
    for (int r = 0; r < n; ++r) {
      if (reaped[size_t(r)]) continue;
      int status = 0;
      if (waitpid(pids[size_t(r)], &status, WNOHANG) == pids[size_t(r)]) {
        reaped[size_t(r)] = true;
        --left;
        progress = true;
        auto& out = result[size_t(r)];
        out.exited = WIFEXITED(status);
        out.exit_code = out.exited ? WEXITSTATUS(status) : -1;
        out.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      }
    }
    if (progress) continue;
    bool only_hangers = true;
    for (int r = 0; r < n; ++r)
      if (!reaped[size_t(r)] && !is_hanger(r)) only_hangers = false;
    bool late = std::chrono::steady_clock::now() > give_up;
    if (only_hangers || late)
      for (int r = 0; r < n; ++r)
        if (!reaped[size_t(r)]) kill(pids[size_t(r)], SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < n; ++r) {
    auto& out = result[size_t(r)];
    std::string rec = read_fd(outs[size_t(r)]);
    auto nl = rec.find('\n');
    if (nl != std::string::npos) {
      out.seconds = std::atof(rec.substr(0, nl).c_str());
      out.output = rec.substr(nl + 1);
    }
    out.log = read_fd(logs[size_t(r)]);
    ::close(outs[size_t(r)]);
    ::close(logs[size_t(r)]);
  }
  return result;
}

std::string describe(const std::vector<RankOutcome>& outcomes) {
  std::string s;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    auto& o = outcomes[r];
    s += fmt::format("rank {}: {} code {} sig {} ({:.2f} s): {}\n", r,
                     o.exited ? "exited" : "killed", o.exit_code, o.signal, o.seconds,
                     o.output.substr(0, 300));
    if (!o.log.empty()) s += "  log: " + o.log.substr(0, 600) + "\n";
  }
  return s;
}

std::string digest(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

}  // namespace shardlm::comm::testing
