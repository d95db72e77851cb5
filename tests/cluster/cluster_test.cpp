// Multi-process cluster tests on loopback: `shardlm worker` daemons on
// OS-chosen ports, `shardlm run --nodes ...` as the coordinator.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cluster/cluster_fixture.h"
#include "core/clock.h"
#include "test_paths.h"

using namespace shardlm::test;

namespace {

TEST_F(ClusterTest, TwoWorkersTellTheSameStoryAsSingleNode) {
  const std::string nodes = start_worker() + "," + start_worker();
  const auto& expected = single_node();
  ASSERT_GT(expected.size(), 30u);
  for (const char* layout : {"tp", "pp"}) {
    SCOPED_TRACE(layout);
    std::vector<std::string> args = {"-n", "40", "--nodes", nodes};
    if (std::string(layout) == "tp") args.insert(args.end(), {"--tp", "2", "--pp", "1"});
    else args.insert(args.end(), {"--tp", "1", "--pp", "2"});
    auto r = run(args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, expected);
    EXPECT_NE(r.err.find(std::string("cluster: 2 workers, tp ") + (layout[0] == 't' ? "2 × pp 1" : "1 × pp 2")),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("slices sent 0.0 MiB"), std::string::npos) << r.err;  // streamed, no cache
    // stderr is a file here: one summary line, no progress-bar frames.
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("] sent "), std::string::npos) << r.err;
  }
  // A hostfile and uneven stages given with --layers.
  const fs::path hostfile = dir_ / "hosts";
  std::ofstream(hostfile) << "# workers\n" << nodes.substr(0, nodes.find(',')) << "\n"
                          << nodes.substr(nodes.find(',') + 1) << "\n";
  auto r = run({"-n", "40", "--hostfile", hostfile.string(), "--tp", "1", "--pp", "2", "--layers", "2,3"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  // The workers were never restarted: every layout ran on the same daemons.
  for (auto& w : workers_) EXPECT_TRUE(w->running());
}

TEST_F(ClusterTest, BenchOnTwoWorkersPrintsARow) {
  const std::string nodes = start_worker() + "," + start_worker();
  const std::string n = std::to_string(runs_++);
  Process bench({shardlm::test_paths::shardlm_binary(), "bench", "-m", kModel, "--nodes", nodes, "--tp", "2", "--prompt", "16", "--gen", "16",
                 "-t", "1"},
                dir_ / ("bench" + n + ".out"), dir_ / ("bench" + n + ".err"), {kToken});
  ASSERT_EQ(bench.wait(), 0) << bench.err();
  const std::string out = bench.out();
  const auto at = out.find("| tp 2 × pp 1 on 2 nodes | 1 | ");
  ASSERT_NE(at, std::string::npos) << out;
  std::istringstream row(out.substr(at + std::string("| tp 2 × pp 1 on 2 nodes | 1 | ").size()));
  double prompt_tps = 0, decode_tps = 0, plan_tps = 0;
  char bar = 0;
  row >> prompt_tps >> bar >> decode_tps >> bar >> plan_tps;
  EXPECT_GT(prompt_tps, 0) << out;
  EXPECT_GT(decode_tps, 0) << out;
  EXPECT_LT(decode_tps, 1e5) << out;  // timed on the worker, not by bursty token arrival
  EXPECT_GT(plan_tps, 0) << out;
  // The breakdown: a tp 2 decode step all-reduces twice per layer (stories260K: 5 layers).
  const auto decode = out.find("| decode | ");
  ASSERT_NE(decode, std::string::npos) << out;
  const std::string line = out.substr(decode, out.find('\n', decode) - decode);
  EXPECT_NE(line.find("| 10.00 |"), std::string::npos) << line;
  for (auto& w : workers_) EXPECT_TRUE(w->running());
  // Too few decoded tokens to time: refused before connecting.
  Process short_run({shardlm::test_paths::shardlm_binary(), "bench", "-m", kModel, "--nodes", nodes, "--gen", "8"}, dir_ / "short.out",
                    dir_ / "short.err", {kToken});
  EXPECT_EQ(short_run.wait(), 2);
  EXPECT_NE(short_run.err().find("shardlm: error: --gen: 8 decoded tokens are too few"), std::string::npos)
      << short_run.err();
}

TEST_F(ClusterTest, WorkerModelMapsItsOwnCopy) {
  const std::string nodes = start_worker() + "," + start_worker();
  auto r = run({"-n", "40", "--nodes", nodes, "--worker-model", kModel});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, single_node());
  EXPECT_NE(r.err.find("slices sent 0.0 MiB"), std::string::npos) << r.err;
}

// A worker's copy of another model of the same size (here the same file with
// the last half of its weights changed, as a fine-tune changes all of them)
// is refused, naming the file.
TEST_F(ClusterTest, WorkerModelOfOtherBytesIsRefused) {
  const fs::path copy = dir_ / "other.gguf";
  fs::copy_file(kModel, copy);
  {
    const auto size = fs::file_size(copy);
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(size / 2));
    const std::string other(size - size / 2, '\x11');
    f.write(other.data(), std::streamsize(other.size()));
  }
  const std::string nodes = start_worker();
  auto r = run({"-n", "8", "--nodes", nodes, "--worker-model", copy.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(copy.string() + " is not the coordinator's model: the same size, other bytes"), std::string::npos)
      << r.err;
}

TEST_F(ClusterTest, CacheHitSkipsTheTransfer) {
  const std::string nodes = start_worker({"--cache-dir", (dir_ / "cache0").string()}) + "," +
                            start_worker({"--cache-dir", (dir_ / "cache1").string()});
  auto first = run({"-n", "24", "--nodes", nodes, "--pp", "2", "--tp", "1"});
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_NE(first.err.find("0 workers had theirs cached"), std::string::npos) << first.err;
  auto second = run({"-n", "24", "--nodes", nodes, "--pp", "2", "--tp", "1"});
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_NE(second.err.find("slices sent 0.0 MiB, 2 workers had theirs cached"), std::string::npos) << second.err;
  EXPECT_EQ(first.out, second.out);
  // A different layout is a different slice: transferred again.
  auto third = run({"-n", "24", "--nodes", nodes, "--tp", "2", "--pp", "1"});
  ASSERT_EQ(third.status, 0) << third.err;
  EXPECT_NE(third.err.find("0 workers had theirs cached"), std::string::npos) << third.err;
}

TEST_F(ClusterTest, KilledWorkerIsNamedAndTheOthersServeTheNextRun) {
  const std::vector<std::string> slow = {"SHARDLM_WORKER_TOKEN_DELAY_MS=50"};
  const std::string survivor = start_worker({}, slow);
  const std::string victim = start_worker({}, slow);
  auto coordinator = start_run({"-n", "200", "--nodes", survivor + "," + victim, "--pp", "2", "--tp", "1"});
  // Wait until tokens flow, then kill the second worker mid-generation.
  wait_for_output(*coordinator, 40);
  if (HasFatalFailure()) return;
  const auto t0 = shardlm::SteadyClock::now();
  workers_[1]->kill9();
  const int status = coordinator->wait(std::chrono::seconds(20));
  const double seconds = shardlm::seconds_since(t0);
  EXPECT_EQ(status, 1) << coordinator->err();
  EXPECT_LT(seconds, 10.0);
  const std::string err = coordinator->err();
  const auto at = err.find("shardlm: error: ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string line = err.substr(at, err.find('\n', at) - at);
  EXPECT_NE(line.find("shardlm: error: worker " + victim + " (rank 2) failed"), std::string::npos) << line;
  EXPECT_EQ(line.find(survivor), std::string::npos) << line;
  // The survivor went back to idle and serves the next run alone.
  EXPECT_TRUE(workers_[0]->running());
  auto next = run({"-n", "40", "--nodes", survivor});
  ASSERT_EQ(next.status, 0) << next.err;
  EXPECT_EQ(next.out, single_node());
}

TEST_F(ClusterTest, WrongTokenIsRefusedOnBothEnds) {
  const std::string node = start_worker();
  auto r = run({"-n", "8", "--nodes", node}, {"SHARDLM_TOKEN=not-the-token"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("shardlm: error: worker " + node), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  usleep(200000);
  EXPECT_NE(workers_[0]->err().find("coordinator"), std::string::npos) << workers_[0]->err();
  // The worker is still there for a coordinator with the right token.
  auto ok = run({"-n", "40", "--nodes", node});
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(ok.out, single_node());
}

TEST_F(ClusterTest, WorkerWithoutMemorySaysSo) {
  const std::string node = start_worker({}, {"SHARDLM_WORKER_MEM_MIB=0"});
  auto r = run({"-n", "8", "--nodes", node, "--force"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("not enough memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("worker " + node), std::string::npos) << r.err;
  const std::string error = r.err.substr(r.err.find("shardlm: error:"));
  EXPECT_EQ(error.find("worker "), error.rfind("worker ")) << "named once: " << error;
  EXPECT_TRUE(workers_[0]->running());
}

TEST_F(ClusterTest, BadNodeListsAreOneLineErrors) {
  auto r = run({"-n", "8", "--nodes", "127.0.0.1:1"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("shardlm: error: worker 127.0.0.1:1"), std::string::npos) << r.err;
  const std::string node = start_worker();
  auto too_many = run({"-n", "8", "--nodes", node, "--tp", "2", "--pp", "1"});
  EXPECT_EQ(too_many.status, 2);  // a layout no nodes could give is a usage error
  EXPECT_NE(too_many.err.find("shardlm: error: plan: tp 2 × pp 1 needs 2 nodes, 1 given"), std::string::npos) << too_many.err;
  EXPECT_TRUE(workers_[0]->running());
}

}  // namespace
