// Workers in separate network namespaces (veth pairs to a bridge), reached
// over real interfaces like separate hosts: set up by scripts/netns-cluster.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cluster/process.h"
#include "core/clock.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using shardlm::test::Process;
using shardlm::test::read_text;

namespace {

using shardlm::test_paths::kStoriesModel;
const std::string kScript = std::string(shardlm::test_paths::models_dir()) + "/../scripts/netns-cluster.sh";

class NetnsCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "netns cluster test needs root (ip netns); not root";
    if (std::system("ip netns list >/dev/null 2>&1") != 0) GTEST_SKIP() << "netns cluster test: `ip netns` unavailable";
    prefix_ = "slmt" + std::to_string(getpid() % 10000);
    subnet_ = "10.79." + std::to_string(getpid() % 200);
    // Probe 1 MiB: a worker's start under AddressSanitizer took 11 s with 16.
    env_ = "SHARDLM_NETNS_PREFIX=" + prefix_ + " SHARDLM_NETNS_SUBNET=" + subnet_ +
           " SHARDLM_NETNS_PROBE_MIB=1 SHARDLM_TOKEN=netns-test-token ";
    dir_ = fs::temp_directory_path() / ("shardlm-netns-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  // Two workers, each in a namespace of its own; `worker_env` ("NAME=value ") is theirs.
  void up(const std::string& worker_env = "") {
    up_ = true;
    const std::string cmd = env_ + worker_env + kScript + " up 2 " + shardlm::test_paths::shardlm_binary() + " > " +
                            (dir_ / "nodes").string() + " 2>" + (dir_ / "up.err").string();
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "netns setup failed: " << read_text(dir_ / "up.err");
    nodes_ = read_text(dir_ / "nodes");
    while (!nodes_.empty() && nodes_.back() == '\n') nodes_.pop_back();
  }
  std::string worker_log(int i) const { return read_text("/tmp/" + prefix_ + "-netns-cluster/worker" + std::to_string(i) + ".log"); }
  void TearDown() override {
    if (up_) {
      EXPECT_EQ(std::system((env_ + kScript + " down").c_str()), 0);
    }
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string run(std::vector<std::string> extra, int* status) {
    std::vector<std::string> argv = {shardlm::test_paths::shardlm_binary(), "run", "-m", kStoriesModel, "-p", "Once upon a time", "-n", "32",
                                     "--temp", "0", "-t", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Process p(argv, dir_ / "run.out", dir_ / "run.err", {"SHARDLM_TOKEN=netns-test-token"});
    *status = p.wait();
    if (*status != 0) ADD_FAILURE() << p.err();
    return p.out();
  }

  std::string prefix_, subnet_, env_, nodes_;
  fs::path dir_;
  bool up_ = false;
};

TEST_F(NetnsCluster, WorkersInNamespacesMatchSingleNode) {
  up();
  if (IsSkipped()) return;
  ASSERT_NE(nodes_.find(','), std::string::npos) << nodes_;
  int status = 0;
  const std::string single = run({}, &status);
  ASSERT_EQ(status, 0);
  const std::string cluster = run({"--nodes", nodes_, "--tp", "2", "--pp", "1"}, &status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(cluster, single);
}

}  // namespace

namespace {

// A network split between the two workers while both still reach the
// coordinator: their comm links carry no heartbeats, so only the kernel's
// keep-alive and retransmission deadlines (cluster/keepalive.h) end the job.
TEST_F(NetnsCluster, SplitBetweenTwoWorkersEndsTheJobWithinThePeerTimeout) {
  up("SHARDLM_WORKER_TOKEN_DELAY_MS=50 ");
  if (IsSkipped()) return;
  Process coordinator({shardlm::test_paths::shardlm_binary(), "run", "-m", kStoriesModel, "-p", "Once upon a time", "-n", "400", "--temp", "0", "-t",
                       "1", "--nodes", nodes_, "--tp", "2", "--pp", "1"},
                      dir_ / "split.out", dir_ / "split.err", {"SHARDLM_TOKEN=netns-test-token"});
  // Until the job is under way (not what is measured: up to 30 s, for
  // sanitizer builds with other tests on the cores).
  for (int i = 0; i < 1500 && coordinator.out().size() < 40; ++i) usleep(20000);
  ASSERT_GE(coordinator.out().size(), 40u) << coordinator.err();
  // The bridge stops forwarding between the workers' ports (isolated ports
  // still reach the host, where the coordinator runs): packets vanish
  // silently, as in a real split; neither worker's stack sees an error.
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(std::system(("bridge link set dev " + prefix_ + "-h" + std::to_string(i) + " isolated on").c_str()), 0);
  const auto t0 = shardlm::SteadyClock::now();
  const int status = coordinator.wait(std::chrono::seconds(30));
  const double seconds = shardlm::seconds_since(t0);
  EXPECT_EQ(status, 1) << coordinator.err();

  EXPECT_LT(seconds, 10.0);  // --peer-timeout 3 s, then the report reaches the coordinator
  const std::string err = coordinator.err();
  const std::string line = err.substr(err.find("shardlm: error: "));
  EXPECT_NE(line.find("worker " + subnet_ + ".1"), std::string::npos) << err;
  // Both workers gave the job up and are idle again.
  for (int i = 0; i < 2; ++i) {
    for (int t = 0; t < 250 && worker_log(i).find("worker: idle") == std::string::npos; ++t) usleep(20000);
    EXPECT_NE(worker_log(i).find("worker: idle"), std::string::npos) << worker_log(i);
  }
}

}  // namespace
