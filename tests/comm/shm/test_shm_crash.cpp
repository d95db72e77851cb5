// Ranks as real processes: a rank killed with SIGKILL in the middle of
// collectives makes the others fail promptly naming it, and a segment left by
// a crash during bootstrap is swept.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "comm/shm/segment.h"
#include "comm/shm/shm_transport.h"
#include "comm/test_shm_helpers.h"
#include "core/error.h"

namespace shardlm::comm {
namespace {

using testing::shm_options;
using testing::shm_world;
using testing::unique_session;

// Forks a child that runs body and _exits with its status; the child writes
// its error message (if any) to `pipe_fd`.
pid_t fork_rank(int pipe_fd, const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  int code = 0;
  try {
    code = body();
  } catch (const std::exception& e) {
    const std::string msg = std::string(e.what()) + "\n";
    code = write(pipe_fd, msg.data(), msg.size()) < 0 ? 3 : 2;
  }
  _exit(code);
}

std::string read_all(int fd) {
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  return out;
}

TEST(ShmCrash, KilledRankIsNamedByTheOthersInTime) {
  const int world = 3, victim = 2;
  const std::string session = unique_session("kill");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank)
    pids.push_back(fork_rank(fds[1], [&, rank] {
      auto o = shm_options(session, rank, world);
      o.timeouts.op = std::chrono::milliseconds(15'000);  // detection must beat this by far
      auto comm = shm_world(o, CommConfig{});
      std::vector<float> buf(size_t(1) << 20, 1.0f);  // chunked: dies between chunks
      for (int it = 0;; ++it) {
        if (rank == victim && it == 3) raise(SIGKILL);
        comm->all_reduce(buf.data(), buf.size(), DType::F32);
        std::fill(buf.begin(), buf.end(), 1.0f);
      }
      return 0;
    }));
  close(fds[1]);
  const auto start = std::chrono::steady_clock::now();
  int statuses[world];
  for (int r = 0; r < world; ++r) ASSERT_EQ(waitpid(pids[size_t(r)], &statuses[r], 0), pids[size_t(r)]);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const std::string errors = read_all(fds[0]);
  close(fds[0]);

  EXPECT_TRUE(WIFSIGNALED(statuses[victim]) && WTERMSIG(statuses[victim]) == SIGKILL);
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 2) << "rank " << r;
  }
  EXPECT_LT(elapsed, std::chrono::seconds(10)) << errors;
  // Each survivor names the victim (directly, or via the first survivor's failure).
  size_t lines = 0, named = 0;
  for (size_t at = 0, nl; (nl = errors.find('\n', at)) != std::string::npos; at = nl + 1, ++lines)
    if (errors.substr(at, nl - at).find("rank 2 (pid " + std::to_string(pids[victim]) + ") died") !=
        std::string::npos)
      ++named;
  EXPECT_EQ(lines, size_t(world - 1)) << errors;
  EXPECT_EQ(named, lines) << errors;
}

TEST(ShmCrash, SegmentOfCrashedBootstrapIsSwept) {
  const std::string session = unique_session("sweep");
  const auto o = shm_options(session, 0, 2);
  const std::string name = shm::segment_name(o.cluster_id + '\n' + o.coordinator, o.token);
  const std::string path = "/dev/shm" + name;
  struct stat st{};
  // Rank 0 creates the segment, then dies while waiting for rank 1.
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      shm::ShmTransport t(o);
    } catch (...) {
    }
    _exit(0);
  }
  for (int i = 0; i < 2000 && stat(path.c_str(), &st) != 0; ++i) usleep(1000);
  ASSERT_EQ(stat(path.c_str(), &st), 0) << "rank 0 never created " << path;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  usleep(20'000);  // let it finish writing the header
  kill(pid, SIGKILL);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT), 0);  // dead, not reaped: a zombie
  // (Another test process may sweep it first; either way it must be gone.)
  shm::sweep_stale_segments();
  EXPECT_NE(stat(path.c_str(), &st), 0) << path << " survived the sweep";
  int status;
  waitpid(pid, &status, 0);
}

TEST(ShmCrash, NewWorldReplacesStaleSegmentOfSameSession) {
  const std::string session = unique_session("restart");
  const auto o = shm_options(session, 0, 2);
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      shm::ShmTransport t(o);
    } catch (...) {
    }
    _exit(0);
  }
  const std::string path = "/dev/shm" + shm::segment_name(o.cluster_id + '\n' + o.coordinator, o.token);
  struct stat st{};
  for (int i = 0; i < 2000 && stat(path.c_str(), &st) != 0; ++i) usleep(1000);
  usleep(20'000);
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  testing::run_ranks(2, [&](int rank) {
    auto comm = shm_world(shm_options(session, rank, 2), CommConfig{});
    float x = float(rank + 1);
    comm->all_reduce(&x, 1, DType::F32);
    EXPECT_EQ(x, 3.0f);
  });
  EXPECT_NE(stat(path.c_str(), &st), 0);
}

}  // namespace
}  // namespace shardlm::comm
