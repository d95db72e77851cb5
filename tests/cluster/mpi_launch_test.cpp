// `mpirun -np N shardlm run --backend mpi`: the ranks mpirun starts are the
// cluster. The text equals single-node `run` for every layout, and a rank
// killed mid-generation ends the job, named, within seconds.
#include <dirent.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster/process.h"
#include "core/clock.h"
#include "test_paths.h"

namespace shardlm::test {
namespace {

namespace fs = std::filesystem;

using shardlm::test_paths::kStoriesModel;
const std::string kMpirun = SHARDLM_MPIRUN;
// Random weights: greedy decoding never meets the end token, so generation
// runs until the test kills a rank.
const std::string kEndlessModel = std::string(shardlm::test_paths::models_dir()) + "/tiny-random-llama-bpe.gguf";
// Containers have no CMA/ptrace for vader's single copy; MPI's own
// allocations are not ours to leak-check.
const std::vector<std::string> kMpiEnv = {"OMPI_MCA_btl_vader_single_copy_mechanism=none",
                                          "OMPI_MCA_rmaps_base_oversubscribe=1", "ASAN_OPTIONS=detect_leaks=0"};

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

class MpiLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kMpirun.empty()) GTEST_SKIP() << "mpirun not found";
    dir_ = fs::temp_directory_path() / ("shardlm-mpi-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> run_args(const std::string& model, std::vector<std::string> extra) {
    std::vector<std::string> a = {shardlm::test_paths::shardlm_binary(), "run", "-m", model, "-p", "Once upon a time", "--temp", "0",
                                  "--seed", "1", "-t", "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::unique_ptr<Process> start(std::vector<std::string> argv, int np = 0) {
    if (np > 0) {
      std::vector<std::string> mpi = {kMpirun, "--oversubscribe", "--allow-run-as-root", "-np", std::to_string(np)};
      argv.insert(argv.begin(), mpi.begin(), mpi.end());
    }
    const std::string n = std::to_string(runs_++);
    return std::make_unique<Process>(argv, dir_ / (n + ".out"), dir_ / (n + ".err"), env_);
  }
  struct Result {
    int status;
    std::string out, err;
  };
  Result run(std::vector<std::string> extra, int np = 0) {
    auto p = start(run_args(kStoriesModel, std::move(extra)), np);
    const int status = p->wait(std::chrono::seconds(120));
    return {status, p->out(), p->err()};
  }

  void expect_every_layout_tells_the_single_node_story();

  fs::path dir_;
  int runs_ = 0;
  std::vector<std::string> env_ = kMpiEnv;
};

void MpiLaunchTest::expect_every_layout_tells_the_single_node_story() {
  const auto single = run({"-n", "40"});
  ASSERT_EQ(single.status, 0) << single.err;
  ASSERT_FALSE(single.out.empty());
  struct Layout {
    int np;
    std::vector<std::string> flags;
  };
  const std::vector<Layout> layouts = {
      {2, {"--tp", "2", "--pp", "1"}},
      {2, {"--tp", "1", "--pp", "2"}},
      {3, {"--tp", "1", "--pp", "3"}},
      {3, {"--tp", "2", "--pp", "1"}},  // the third rank is left out and waits
  };
  for (const auto& l : layouts) {
    std::vector<std::string> extra = {"-n", "40", "--backend", "mpi"};
    extra.insert(extra.end(), l.flags.begin(), l.flags.end());
    const auto r = run(extra, l.np);
    const std::string what = "-np " + std::to_string(l.np) + " " + l.flags[0] + " " + l.flags[1] + " " +
                             l.flags[2] + " " + l.flags[3];
    EXPECT_EQ(r.status, 0) << what << "\n" << r.err;
    EXPECT_EQ(r.out, single.out) << what << "\n" << r.err;
    EXPECT_NE(r.err.find("mpi: " + std::to_string(l.np) + " ranks"), std::string::npos) << what << "\n" << r.err;
  }
}

TEST_F(MpiLaunchTest, EveryLayoutTellsTheSingleNodeStory) { expect_every_layout_tells_the_single_node_story(); }

// The same through OpenMPI's UCX layer (its shared-memory and TCP transports
// here; RDMA where the hardware is), where UCX starts on this machine.
TEST_F(MpiLaunchTest, EveryLayoutTellsTheSingleNodeStoryOverUcx) {
  env_.insert(env_.end(), {"OMPI_MCA_pml=ucx", "OMPI_MCA_pml_ucx_tls=any", "OMPI_MCA_pml_ucx_devices=any"});
  const auto probe = run({"-n", "1", "--backend", "mpi"}, 1);
  if (probe.status != 0) GTEST_SKIP() << "OpenMPI's pml ucx does not start here:\n" << probe.err;
  expect_every_layout_tells_the_single_node_story();
}

TEST_F(MpiLaunchTest, WithoutALauncherItSaysSo) {
  const auto r = run({"-n", "4", "--backend", "mpi"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("shardlm: error: --backend mpi: start shardlm with mpirun"), std::string::npos) << r.err;
}

// mpirun binds a lone rank to one core unless told otherwise; the rank's
// threads get the host back. A binding the user names is kept, and a -t
// beyond it is pointed out.
TEST_F(MpiLaunchTest, MpirunsDefaultBindingIsReleasedANamedOneKept) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one CPU: nothing to release";
  const auto released = run({"-n", "2", "--backend", "mpi"}, 1);
  EXPECT_EQ(released.status, 0) << released.err;
  EXPECT_NE(released.err.find("mpi: mpirun bound this rank to 1 CPU(s) by default; released to"), std::string::npos)
      << released.err;

  env_.push_back("OMPI_MCA_hwloc_base_binding_policy=core");  // what `mpirun --bind-to core` passes on
  std::vector<std::string> args = {shardlm::test_paths::shardlm_binary(), "run", "-m", kStoriesModel, "-p", "Once", "-n", "2",
                                   "--temp", "0", "-t", "2", "--backend", "mpi"};
  auto p = start(args, 1);
  EXPECT_EQ(p->wait(std::chrono::seconds(120)), 0) << p->err();
  EXPECT_EQ(p->err().find("released"), std::string::npos) << p->err();
  EXPECT_NE(p->err().find("mpi rank 0: -t 2 on the 1 CPU(s) its binding allows"), std::string::npos) << p->err();
}

// Expert parallel under mpirun, with rank 1's expert slices sent by rank 0.
TEST_F(MpiLaunchTest, ExpertParallelTellsTheSingleNodeStory) {
  const std::string model = std::string(shardlm::test_paths::models_dir()) + "/synthetic/tiny-random-qwen3moe.gguf";
  auto single = start(run_args(model, {"-n", "24"}));
  ASSERT_EQ(single->wait(std::chrono::seconds(120)), 0) << single->err();
  for (bool distribute : {false, true}) {
    std::vector<std::string> flags = {"-n", "24", "--backend", "mpi", "--ep", "2"};
    if (distribute) flags.push_back("--distribute-weights");
    auto p = start(run_args(model, flags), 2);
    EXPECT_EQ(p->wait(std::chrono::seconds(120)), 0) << p->err();
    EXPECT_EQ(p->out(), single->out()) << p->err();
    EXPECT_NE(p->err().find("mpi: 2 ranks on 1 host(s), tp 2 × pp 1"), std::string::npos) << p->err();
    if (distribute) {
      EXPECT_NE(p->err().find("mpi: sending rank 1 its slices"), std::string::npos) << p->err();
    }
  }
}

// Only rank 0 can read the model (the other is given a path that does not
// exist: mpirun's MPMD form); it sends rank 1 its slices, which rank 1 keeps
// in --cache-dir, so the second launch sends nothing.
TEST_F(MpiLaunchTest, DistributedWeightsNeedTheModelOnRankZeroOnly) {
  const auto single = run({"-n", "40"});
  ASSERT_EQ(single.status, 0) << single.err;
  const std::string cache = (dir_ / "cache").string();
  const std::vector<std::string> flags = {"-n", "40", "--backend", "mpi", "--tp", "1", "--pp", "2",
                                          "--distribute-weights", "--cache-dir", cache};
  std::vector<std::string> argv = {kMpirun, "--oversubscribe", "--allow-run-as-root", "-np", "1"};
  for (const std::string& model : {kStoriesModel, (dir_ / "absent.gguf").string()}) {
    if (model != kStoriesModel) argv.insert(argv.end(), {":", "-np", "1"});
    const auto rank = run_args(model, flags);
    argv.insert(argv.end(), rank.begin(), rank.end());
  }
  for (const char* expected : {"mpi: sending rank 1 its slices", "are cached, nothing sent"}) {
    auto p = start(argv);
    const int status = p->wait(std::chrono::seconds(120));
    EXPECT_EQ(status, 0) << p->err();
    EXPECT_EQ(p->out(), single.out) << p->err();
    EXPECT_NE(p->err().find(expected), std::string::npos) << p->err();
  }
}

// Ranks started with another model or other layout flags than rank 0 fail at
// once, naming the rank and what differs (they waited for one another forever).
TEST_F(MpiLaunchTest, RanksStartedDifferentlyAreNamed) {
  const auto run_tp2 = run_args(kStoriesModel, {"-n", "8", "--backend", "mpi", "--tp", "2"});
  const std::vector<std::string> serve_tp2 = {shardlm::test_paths::shardlm_binary(), "serve", "-m", kStoriesModel, "--backend", "mpi",
                                              "--tp", "2", "--port", "0", "-t", "1", "-c", "256"};
  auto serve_with = [&](const std::string& flag) {
    auto a = serve_tp2;
    a.push_back(flag);
    return a;
  };
  struct Case {
    std::vector<std::string> first, second;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {run_tp2, run_args(kEndlessModel, {"-n", "8", "--backend", "mpi", "--tp", "2"}),
       "its model " + kEndlessModel + " is not rank 0's " + kStoriesModel},
      {run_tp2, run_args(kStoriesModel, {"-n", "8", "--backend", "mpi", "--pp", "2"}), "mpi rank 1 was started with --pp 2"},
      {run_tp2, run_args(kStoriesModel, {"-n", "8", "--backend", "mpi", "--tp", "2", "--distribute-weights"}),
       "mpi rank 1 was started with --distribute-weights true"},
      // Ranks attending in different sum orders would give a request different bits by where it runs.
      {serve_tp2, serve_with("--batch-invariant"), "mpi rank 1 was started with --batch-invariant true"},
  };
  for (const auto& [first, second, expected] : cases) {
    std::vector<std::string> argv = {kMpirun, "--oversubscribe", "--allow-run-as-root", "-np", "1"};
    argv.insert(argv.end(), first.begin(), first.end());
    argv.insert(argv.end(), {":", "-np", "1"});
    argv.insert(argv.end(), second.begin(), second.end());
    auto p = start(argv);
    EXPECT_NE(p->wait(std::chrono::seconds(60)), 0) << expected;
    EXPECT_NE(p->err().find(expected), std::string::npos) << p->err();
    EXPECT_EQ(occurrences(p->err(), "shardlm: error:"), 1u) << "rank 0 alone reports it: " << p->err();
  }
}

// A layout the ranks cannot give is a usage error (exit 2), reported once.
TEST_F(MpiLaunchTest, ImpossibleLayoutIsOneUsageError) {
  auto p = start(run_args(kStoriesModel, {"-n", "8", "--backend", "mpi", "--tp", "5"}), 2);
  EXPECT_EQ(p->wait(std::chrono::seconds(60)), 2) << p->err();
  EXPECT_NE(p->err().find("shardlm: error: plan: tp 5 × pp 1 needs 5 nodes, 2 given"), std::string::npos) << p->err();
  EXPECT_EQ(occurrences(p->err(), "shardlm: error:"), 1u) << p->err();
}

// `serve` over MPI: rank 0 serves HTTP, both ranks compute every step.
TEST_F(MpiLaunchTest, ServeAnswersAChatOverTwoRanks) {
  auto server = start({shardlm::test_paths::shardlm_binary(), "serve", "-m", kStoriesModel, "--backend", "mpi", "--tp", "2", "--port", "0", "-t", "1",
                       "-c", "256"},
                      2);
  int port = 0;
  for (int i = 0; i < 1500 && port == 0; ++i) {
    const std::string out = server->out();
    if (const auto at = out.find("on http://127.0.0.1:"); at != std::string::npos && out.find('\n', at) != std::string::npos)
      port = std::atoi(out.c_str() + at + std::strlen("on http://127.0.0.1:"));
    else usleep(20000);
  }
  ASSERT_GT(port, 0) << server->err();
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  const nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                               {"max_tokens", 16},
                               {"temperature", 0}};
  const auto r = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r) << server->err();
  ASSERT_EQ(r->status, 200) << r->body;
  const auto reply = nlohmann::json::parse(r->body);
  EXPECT_FALSE(reply["choices"][0]["message"]["content"].get<std::string>().empty()) << r->body;
  EXPECT_EQ(reply["usage"]["completion_tokens"], 16) << r->body;
  EXPECT_NE(server->err().find("serve: tp 2 × pp 1 on 2 MPI ranks"), std::string::npos) << server->err();
  // mpirun passes SIGTERM on to every rank: the job ends, none is left behind.
  const auto t0 = shardlm::SteadyClock::now();
  kill(server->pid(), SIGTERM);
  server->wait(std::chrono::seconds(30));
  EXPECT_LT(shardlm::seconds_since(t0), 10.0);
}

// The pid of the rank `rank` among the processes mpirun `parent` started.
pid_t rank_pid(pid_t parent, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  DIR* proc = opendir("/proc");
  pid_t found = -1;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string skip, state;
    pid_t ppid = 0;
    if (!(stat >> skip >> skip >> state >> ppid) || ppid != parent) continue;
    std::ifstream env("/proc/" + std::to_string(pid) + "/environ");
    std::string var;
    while (std::getline(env, var, '\0'))
      if (var == want) found = pid;
  }
  closedir(proc);
  return found;
}

TEST_F(MpiLaunchTest, AKilledRankEndsTheJobNamingIt) {
  auto job = start(run_args(kEndlessModel, {"-n", "100000", "-c", "100001", "--backend", "mpi", "--tp", "1", "--pp",
                                            "2"}),
                   2);
  for (int i = 0; i < 1500 && job->out().size() < 40; ++i) usleep(20000);
  ASSERT_GE(job->out().size(), 40u) << job->err();
  const pid_t victim = rank_pid(job->pid(), 1);
  ASSERT_GT(victim, 0);
  const auto t0 = shardlm::SteadyClock::now();
  kill(victim, SIGKILL);
  const int status = job->wait(std::chrono::seconds(30));
  const double seconds = shardlm::seconds_since(t0);
  EXPECT_NE(status, 0) << job->err();
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(job->err().find("rank 1"), std::string::npos) << job->err();
}

}  // namespace
}  // namespace shardlm::test
