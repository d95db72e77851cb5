// Workers in separate network namespaces (veth pairs to a bridge), reached
// over real interfaces like separate hosts: set up by scripts/netns-cluster.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cluster/process.h"

namespace fs = std::filesystem;
using shardlm::test::Process;
using shardlm::test::read_text;

namespace {

const std::string kScript = SHARDLM_REPO_MODELS "/../scripts/netns-cluster.sh";
const std::string kModel = SHARDLM_REPO_MODELS "/stories260K.gguf";

class NetnsCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "netns cluster test needs root (ip netns); not root";
    if (std::system("ip netns list >/dev/null 2>&1") != 0) GTEST_SKIP() << "netns cluster test: `ip netns` unavailable";
    prefix_ = "slmt" + std::to_string(getpid() % 10000);
    env_ = "SHARDLM_NETNS_PREFIX=" + prefix_ + " SHARDLM_NETNS_SUBNET=10.79." + std::to_string(getpid() % 200) +
           " SHARDLM_TOKEN=netns-test-token ";
    dir_ = fs::temp_directory_path() / ("shardlm-netns-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    up_ = true;
    const std::string cmd = env_ + kScript + " up 2 " + SHARDLM_BINARY + " > " + (dir_ / "nodes").string() + " 2>" +
                            (dir_ / "up.err").string();
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "netns setup failed: " << read_text(dir_ / "up.err");
    nodes_ = read_text(dir_ / "nodes");
    while (!nodes_.empty() && nodes_.back() == '\n') nodes_.pop_back();
  }
  void TearDown() override {
    if (up_) {
      EXPECT_EQ(std::system((env_ + kScript + " down").c_str()), 0);
    }
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string run(std::vector<std::string> extra, int* status) {
    std::vector<std::string> argv = {SHARDLM_BINARY, "run", "-m", kModel, "-p", "Once upon a time", "-n", "32",
                                     "--temp", "0", "-t", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Process p(argv, dir_ / "run.out", dir_ / "run.err", {"SHARDLM_TOKEN=netns-test-token"});
    *status = p.wait();
    if (*status != 0) ADD_FAILURE() << p.err();
    return p.out();
  }

  std::string prefix_, env_, nodes_;
  fs::path dir_;
  bool up_ = false;
};

TEST_F(NetnsCluster, WorkersInNamespacesMatchSingleNode) {
  ASSERT_NE(nodes_.find(','), std::string::npos) << nodes_;
  int status = 0;
  const std::string single = run({}, &status);
  ASSERT_EQ(status, 0);
  const std::string cluster = run({"--nodes", nodes_, "--tp", "2", "--pp", "1"}, &status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(cluster, single);
}

}  // namespace
