// The hangs of issue #12: a worker (or coordinator) that stops answering
// without closing its sockets, a busy worker, idle and garbage connections,
// two names for one worker. Every case must end within its deadline.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <random>

#include <fmt/format.h>

#include "cluster/cluster_fixture.h"
#include "core/clock.h"
#include "test_paths.h"

using namespace shardlm::test;

namespace {

using shardlm::seconds_since;
using SteadyClock = shardlm::SteadyClock;

std::string error_line(const std::string& err) {
  const auto at = err.find("shardlm: error: ");
  if (at == std::string::npos) return "";
  return err.substr(at, err.find('\n', at) - at);
}

// A raw TCP connection to "127.0.0.1:port", as a port scanner or health check makes.
int open_raw(const std::string& node) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(std::stoi(node.substr(node.rfind(':') + 1))));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

TEST_F(ClusterTest, StoppedWorkerIsNamedWithinFiveSecondsAndTheOtherGoesIdle) {
  const std::vector<std::string> slow = {"SHARDLM_WORKER_TOKEN_DELAY_MS=50"};
  const std::string survivor = start_worker({}, slow);
  const std::string victim = start_worker({}, slow);
  auto coordinator = start_run({"-n", "400", "--nodes", survivor + "," + victim, "--pp", "2", "--tp", "1"});
  wait_for_output(*coordinator, 40);
  const auto t0 = SteadyClock::now();
  workers_[1]->signal_group(SIGSTOP);  // the daemon and its job process: a frozen machine
  const int status = coordinator->wait(std::chrono::seconds(20));
  const double seconds = seconds_since(t0);
  EXPECT_EQ(status, 1) << coordinator->err();
  EXPECT_LT(seconds, 5.0);
  const std::string line = error_line(coordinator->err());
  EXPECT_NE(line.find("worker " + victim + " (rank 2) not responding"), std::string::npos) << coordinator->err();
  // The survivor heard why, named the victim, and serves the next run alone.
  wait_for_err(*workers_[0], "worker: idle", 100);
  EXPECT_NE(workers_[0]->err().find(victim), std::string::npos) << workers_[0]->err();
  auto next = run({"-n", "40", "--nodes", survivor});
  ASSERT_EQ(next.status, 0) << next.err;
  EXPECT_EQ(next.out, single_node());
  workers_[1]->signal_group(SIGCONT);
}

// The coordinator of the one worker at `node` stops (SIGSTOP: a frozen
// machine) mid-job: within 5 s the worker says it is not responding and goes
// idle, its job's slices removed, and serves the next coordinator.
class StoppedCoordinatorTest : public ClusterTest {
 protected:
  void stop_and_expect_the_worker_to_give_up(Process& coordinator, const std::string& node) {
    coordinator.signal_group(SIGSTOP);
    const auto t0 = SteadyClock::now();
    while (seconds_since(t0) < 20 && workers_[0]->err().find("worker: idle") == std::string::npos) usleep(20000);
    EXPECT_LT(seconds_since(t0), 5.0) << workers_[0]->err();
    EXPECT_NE(workers_[0]->err().find("not responding"), std::string::npos) << workers_[0]->err();
    // The job process gave up at once (_exit); the daemon removed its slices'
    // directory. (Only this job's: another test's daemon killed with -9 on a
    // port since reused may have left one, which the CI once saw.)
    const fs::path job_dir = last_job_dir(*workers_[0], node);
    EXPECT_FALSE(job_dir.empty()) << workers_[0]->err();
    EXPECT_FALSE(fs::exists(job_dir)) << job_dir << " was left behind";
    coordinator.kill9();
    auto next = run({"-n", "40", "--nodes", node});
    ASSERT_EQ(next.status, 0) << next.err;
    EXPECT_EQ(next.out, single_node());
  }
};

// (A 2 s peer timeout against the 5 s bound: with the default 3 s the worker
// once took over 5 s to say idle under AddressSanitizer beside another test.)
TEST_F(StoppedCoordinatorTest, WorkersGiveUpAStoppedCoordinator) {
  const std::string node = start_worker({}, {"SHARDLM_WORKER_TOKEN_DELAY_MS=50"});
  auto coordinator = start_run({"-n", "400", "--nodes", node, "--peer-timeout", "2"});
  wait_for_output(*coordinator, 40);
  stop_and_expect_the_worker_to_give_up(*coordinator, node);
}

TEST_F(ClusterTest, SecondCoordinatorIsToldAtOnceThatTheWorkerIsBusy) {
  const std::string node = start_worker({}, {"SHARDLM_WORKER_TOKEN_DELAY_MS=50"});
  auto first = start_run({"-n", "400", "--nodes", node});
  wait_for_output(*first, 40);
  const auto t0 = SteadyClock::now();
  auto second = run({"-n", "8", "--nodes", node});
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_EQ(second.status, 1);
  EXPECT_NE(error_line(second.err).find("worker " + node + ": worker busy (serving job from 127.0.0.1:"),
            std::string::npos)
      << second.err;
  EXPECT_EQ(second.out, "");
  first->kill9();
}

TEST_F(ClusterTest, IdleAndGarbageConnectionsNeverDelayAJob) {
  const std::string node = start_worker();
  std::vector<int> idle;
  for (int i = 0; i < 5; ++i) idle.push_back(open_raw(node));
  const int garbage = open_raw(node);
  const std::string junk(4096, 'x');
  EXPECT_GT(send(garbage, junk.data(), junk.size(), MSG_NOSIGNAL), 0);
  const auto t0 = SteadyClock::now();
  auto r = run({"-n", "40", "--nodes", node});
  EXPECT_LT(seconds_since(t0), 4.0);  // five idle connections once cost 50 s
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, single_node());
  for (int fd : idle) close(fd);
  close(garbage);
  EXPECT_TRUE(workers_[0]->running());
}

// A worker frozen before the job (its port still accepts) is named within
// the peer timeout, not a fixed handshake time (10 s before).
TEST_F(ClusterTest, FrozenWorkerIsNamedAtConnectWithinThePeerTimeout) {
  const std::string a = start_worker();
  const std::string b = start_worker();
  workers_[1]->signal_group(SIGSTOP);
  const auto t0 = SteadyClock::now();
  const auto r = run({"-n", "8", "--nodes", a + "," + b, "--tp", "2", "--peer-timeout", "2"});
  const double took = seconds_since(t0);
  workers_[1]->signal_group(SIGCONT);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("worker " + b + ": not responding for 2 s (the handshake; --peer-timeout)"), std::string::npos) << r.err;
  EXPECT_LT(took, 6.0);
}

// A worker that freezes while it sets the job up (receiving or loading its
// slices can take minutes) is named within the peer timeout; one that is
// merely slow beats all along and is not.
TEST_F(ClusterTest, WorkerStoppedDuringSetupIsNamedWithinThePeerTimeout) {
  const std::string a = start_worker();
  const std::string b = start_worker({}, {"SHARDLM_WORKER_SETUP_DELAY_MS=30000"});
  // A 2 s timeout: under ASan with another cluster test beside it, a healthy
  // worker's beats were seen to lag past 1 s (the thirteenth session's CI).
  auto coordinator = start_run({"-n", "8", "--nodes", a + "," + b, "--pp", "2", "--tp", "1", "--peer-timeout", "2"});
  ASSERT_TRUE(wait_for_err(*workers_[1], "worker: job as rank", kReadyPolls)) << workers_[1]->err();
  workers_[1]->signal_group(SIGSTOP);
  const auto t0 = SteadyClock::now();
  EXPECT_EQ(coordinator->wait(std::chrono::seconds(20)), 1);
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_NE(error_line(coordinator->err()).find("worker " + b + ": not responding for 2 s (--peer-timeout)"),
            std::string::npos)
      << coordinator->err();
  workers_[1]->signal_group(SIGCONT);
  EXPECT_TRUE(wait_for_err(*workers_[0], "worker: idle", 250)) << workers_[0]->err();
}

TEST_F(ClusterTest, SetupLongerThanThePeerTimeoutIsNotSilence) {
  const std::string a = start_worker({}, {"SHARDLM_WORKER_SETUP_DELAY_MS=3000"});
  const std::string b = start_worker({}, {"SHARDLM_WORKER_SETUP_DELAY_MS=3000"});
  auto r = run({"-n", "40", "--nodes", a + "," + b, "--pp", "2", "--tp", "1", "--peer-timeout", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, single_node());
}

// A coordinator that stops while the workers set up (here after they said
// ready, so before they connect to it and while they load) is given up within
// the peer timeout. (--worker-model: no transfer, so the stop comes after it.)
TEST_F(StoppedCoordinatorTest, WorkersGiveUpACoordinatorStoppedDuringSetup) {
  const std::string node = start_worker({}, {"SHARDLM_WORKER_SETUP_DELAY_MS=1000"});
  auto coordinator = start_run({"-n", "8", "--nodes", node, "--peer-timeout", "1", "--worker-model", kModel});
  wait_for_err(*workers_[0], "worker: job as rank", kReadyPolls);
  stop_and_expect_the_worker_to_give_up(*coordinator, node);
}

// While a worker serves a job, strangers connect to it: idle connections,
// random bytes, half a handshake that then stalls. The job does not notice.
TEST_F(ClusterTest, GarbageAndHalfOpenConnectionsDuringAJobLeaveItUnaffected) {
  const auto reference = run({"-n", "100"});
  ASSERT_EQ(reference.status, 0) << reference.err;
  const std::string node = start_worker({}, {"SHARDLM_WORKER_TOKEN_DELAY_MS=20"});
  auto job = start_run({"-n", "100", "--nodes", node});
  wait_for_output(*job, 20);
  std::vector<int> strangers;
  for (int i = 0; i < 32; ++i) strangers.push_back(open_raw(node));  // idle
  std::mt19937 random(12);
  for (int i = 0; i < 8; ++i) {
    std::string bytes(size_t(1 + random() % 9000), '\0');
    for (auto& c : bytes) c = char(random());
    const int fd = open_raw(node);
    EXPECT_GT(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), 0);
    strangers.push_back(fd);
  }
  for (int i = 0; i < 4; ++i) {
    // The first 40 of the 88 bytes of a HELLO (net/handshake.h), then nothing.
    std::string hello = "SHLMCOMM";
    hello.append("\x01\0\0\0", 4);
    hello.append(28, '\0');
    const int fd = open_raw(node);
    EXPECT_EQ(send(fd, hello.data(), hello.size(), MSG_NOSIGNAL), ssize_t(hello.size()));
    strangers.push_back(fd);
  }
  EXPECT_EQ(job->wait(std::chrono::seconds(60)), 0) << job->err();
  EXPECT_EQ(job->out(), reference.out);
  for (int fd : strangers) close(fd);
  auto next = run({"-n", "40", "--nodes", node});
  ASSERT_EQ(next.status, 0) << next.err;
  EXPECT_EQ(next.out, single_node());
}

TEST_F(ClusterTest, OneWorkerTwiceInTheNodeListIsAnImmediateError) {
  const std::string node = start_worker();
  const std::string port = node.substr(node.rfind(':') + 1);
  struct Case {
    std::string nodes, message;
    int status;
  };
  for (const Case& c : {Case{node + "," + node, "--nodes: '" + node + "' is listed twice", 2},
                        Case{node + ",localhost:" + port, "are the same worker", 1}}) {
    SCOPED_TRACE(c.nodes);
    const auto t0 = SteadyClock::now();
    auto r = run({"-n", "8", "--nodes", c.nodes});
    EXPECT_LT(seconds_since(t0), 2.0);
    EXPECT_EQ(r.status, c.status);
    EXPECT_NE(error_line(r.err).find(c.message), std::string::npos) << r.err;
  }
}

// Consecutive runs on three workers: one stopped, one killed, one restarted.
TEST_F(ClusterTest, ThreeWorkersStoppedKilledRestarted) {
  const std::vector<std::string> slow = {"SHARDLM_WORKER_TOKEN_DELAY_MS=50"};
  const std::string a = start_worker({}, slow), b = start_worker({}, slow), c = start_worker({}, slow);
  auto first = start_run({"-n", "400", "--nodes", a + "," + b + "," + c, "--pp", "3", "--tp", "1"});
  wait_for_output(*first, 40);
  workers_[2]->signal_group(SIGSTOP);
  EXPECT_EQ(first->wait(std::chrono::seconds(20)), 1);
  EXPECT_NE(error_line(first->err()).find("worker " + c + " (rank 3) not responding"), std::string::npos)
      << first->err();
  auto second = run({"-n", "40", "--nodes", a + "," + b, "--pp", "2", "--tp", "1"});
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(second.out, single_node());
  workers_[1]->kill9();
  auto third = run({"-n", "40", "--nodes", a + "," + b, "--pp", "2", "--tp", "1"});
  EXPECT_EQ(third.status, 1);
  EXPECT_NE(error_line(third.err).find("worker " + b + ": cannot connect"), std::string::npos) << third.err;
  const std::string restarted = start_worker();
  auto fourth = run({"-n", "40", "--nodes", a + "," + restarted, "--pp", "2", "--tp", "1"});
  ASSERT_EQ(fourth.status, 0) << fourth.err;
  EXPECT_EQ(fourth.out, single_node());
  workers_[2]->signal_group(SIGCONT);
}

// A port the OS chose, held open (so taken) until the test closes it.
int taken_port(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof a;
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

// Whether a listener could bind `port` now (it is released again at once).
bool port_is_free(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return free;
}

// A taken port (its listener returned, the port in *port) whose next
// `free_after` ports are free now: the workers and tests running beside this
// one hold ports too. -1 after 50 tries.
int taken_port_before_free(uint16_t* port, int free_after) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int taken = taken_port(port);
    bool free = true;
    for (int i = 1; i <= free_after && free; ++i) free = port_is_free(uint16_t(*port + i));
    if (free) return taken;
    close(taken);
  }
  return -1;
}

// --comm-port: the workers connect back to the first free port of the range.
TEST_F(ClusterTest, CommPortFixesWhereTheWorkersConnectBack) {
  const std::string node = start_worker();
  uint16_t taken_at = 0;
  const int taken = taken_port_before_free(&taken_at, 1);
  ASSERT_GE(taken, 0) << "no taken port with a free next one in 50 tries";
  const std::string port = std::to_string(taken_at), next = std::to_string(taken_at + 1);
  auto run_debug = [&](const std::string& range) {
    Process p({shardlm::test_paths::shardlm_binary(), "--log-level", "debug", "run", "-m", kModel, "-p", "Once upon a time", "--temp", "0",
               "-t", "1", "-n", "40", "--nodes", node, "--comm-port", range},
              dir_ / "comm.out", dir_ / "comm.err", {kToken});
    const int status = p.wait();
    return Result{status, p.out(), p.err()};
  };
  const auto refused = run_debug(port);
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(error_line(refused.err).find("--comm-port: no free port in " + port + "-" + port), std::string::npos)
      << refused.err;
  const auto moved = run_debug(port + "-" + next);
  ASSERT_EQ(moved.status, 0) << moved.err;
  EXPECT_NE(moved.err.find("the job's links from the workers come to port " + next), std::string::npos) << moved.err;
  EXPECT_EQ(moved.out, single_node());
  close(taken);
}

// The port a worker's job listened on for the other workers ("... come to port N"), 0 if none.
int worker_comm_port(const std::string& err) {
  const std::string mark = "the job's links from other workers come to port ";
  const auto at = err.find(mark);
  return at == std::string::npos ? 0 : std::atoi(err.c_str() + at + mark.size());
}

// --comm-port holds the workers' links too: every listener of the job (the
// coordinator's and rank 1's; the last rank takes no links) is in the range,
// and a range too small for all of them is an error naming it.
TEST_F(ClusterTest, CommPortRangeHoldsTheWorkersLinks) {
  const std::string a = start_worker(), b = start_worker();
  uint16_t low = 0;
  const int taken = taken_port_before_free(&low, 2);
  ASSERT_GE(taken, 0) << "no taken port with two free next ones in 50 tries";
  const auto wait_idle = [&](size_t jobs) {
    for (const auto& w : workers_) {
      for (int i = 0; i < 250 && count_of(w->err(), "worker: idle") < jobs; ++i) usleep(20000);
      EXPECT_EQ(count_of(w->err(), "worker: idle"), jobs) << w->err();
    }
  };
  const std::string wide = fmt::format("{}-{}", low, low + 2), narrow = fmt::format("{}-{}", low, low + 1);
  auto r = run({"-n", "40", "--nodes", a + "," + b, "--pp", "2", "--tp", "1", "--comm-port", wide});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, single_node());
  const int port = worker_comm_port(workers_[0]->err());  // rank 1; the coordinator has low + 1
  EXPECT_GT(port, int(low) + 1) << workers_[0]->err();
  EXPECT_LE(port, int(low) + 2) << workers_[0]->err();
  EXPECT_EQ(worker_comm_port(workers_[1]->err()), 0) << workers_[1]->err();
  wait_idle(1);
  auto refused = run({"-n", "40", "--nodes", a + "," + b, "--pp", "2", "--tp", "1", "--comm-port", narrow});
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(error_line(refused.err).find("worker " + a + ": --comm-port: no free port in " + narrow), std::string::npos)
      << refused.err;
  wait_idle(2);  // the refused job ended on both workers
  close(taken);
  auto next = run({"-n", "40", "--nodes", a + "," + b, "--pp", "2", "--tp", "1"});
  ASSERT_EQ(next.status, 0) << next.err;
}

// A worker that dies after saying it is ready, while the coordinator still
// waits for another (here one slow to set up): the job's rendezvous ends with
// an error naming it within moments, not after the rendezvous timeout.
TEST_F(ClusterTest, WorkerKilledBeforeTheRendezvousIsNamedAtOnce) {
  const std::string victim = start_worker();
  const std::string slow = start_worker({}, {"SHARDLM_WORKER_SETUP_DELAY_MS=1500"});
  auto coordinator = start_run({"-n", "8", "--nodes", victim + "," + slow, "--pp", "2", "--tp", "1"});
  const std::string ready = "worker: ready, joining the job's communicator";
  ASSERT_TRUE(wait_for_err(*workers_[0], ready, kReadyPolls)) << workers_[0]->err();
  workers_[0]->signal_group(SIGKILL);  // the daemon and its job process
  const auto t0 = SteadyClock::now();
  EXPECT_EQ(coordinator->wait(std::chrono::seconds(20)), 1);
  EXPECT_LT(seconds_since(t0), 5.0);  // the slow worker's setup, then at once (once: 30 s)
  EXPECT_NE(error_line(coordinator->err()).find("worker " + victim + " (rank 1) failed (connection lost)"),
            std::string::npos)
      << coordinator->err();
  EXPECT_TRUE(wait_for_err(*workers_[1], "worker: idle", 250)) << workers_[1]->err();
}

TEST_F(ClusterTest, ClosedPortIsRefusedAtOnce) {
  const auto t0 = SteadyClock::now();
  auto r = run({"-n", "8", "--nodes", "127.0.0.1:1"});
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(error_line(r.err).find("worker 127.0.0.1:1: cannot connect: Connection refused"), std::string::npos)
      << r.err;
}

}  // namespace
