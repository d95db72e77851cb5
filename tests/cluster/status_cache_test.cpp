// `shardlm status --nodes ...` (what each worker says about itself) and the
// worker's --cache-max-bytes (least recently used shards are removed first).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <fstream>
#include <regex>

#include "cluster/cluster_fixture.h"
#include "test_paths.h"

using namespace shardlm::test;

namespace {

class StatusAndCache : public ClusterTest {
 protected:
  Result status(std::vector<std::string> args) {
    args.insert(args.begin(), {shardlm::test_paths::shardlm_binary(), "status"});
    Process p(args, dir_ / "status.out", dir_ / "status.err", {kToken});
    const int code = p.wait();
    return {code, p.out(), p.err()};
  }
  Result run_model(const std::string& model, const std::string& nodes) {
    Process p({shardlm::test_paths::shardlm_binary(), "run", "-m", model, "-p", "Once upon a time", "-n", "8", "--temp", "0", "-t", "1",
               "--nodes", nodes},
              dir_ / "model.out", dir_ / "model.err", {kToken});
    const int code = p.wait();
    return {code, p.out(), p.err()};
  }
};

TEST_F(StatusAndCache, StatusSaysHowEachWorkerIsAndForWhomItWorks) {
  const std::string idle = start_worker({"--cache-dir", (dir_ / "cache").string()});
  const std::string busy = start_worker({}, {"SHARDLM_WORKER_TOKEN_DELAY_MS=50"});
  ASSERT_EQ(run({"-n", "8", "--nodes", idle}).status, 0);  // leaves one shard in the cache
  auto job = start_run({"-n", "400", "--nodes", busy});
  wait_for_output(*job, 20);
  if (HasFatalFailure()) return;

  const auto text = status({"--nodes", idle + "," + busy});
  ASSERT_EQ(text.status, 0) << text.err;
  const auto newline = text.out.find('\n');
  const std::string first = text.out.substr(0, newline), second = text.out.substr(newline + 1);
  EXPECT_TRUE(std::regex_search(first, std::regex("^" + idle + "  idle  shardlm 0\\.1\\.0  [0-9]+ cores, [0-9]+ MiB "
                                                   "available, [0-9.]+ GB/s  cpu: .+  cache: 1 slices, 1\\.[0-9] MiB$")))
      << first;
  EXPECT_TRUE(std::regex_search(second, std::regex("^" + busy + "  busy \\(job from 127\\.0\\.0\\.1:[0-9]+ since "
                                                    "20[0-9-]+T[0-9:]+Z\\)  shardlm 0\\.1\\.0  .*cache: 0 slices")))
      << second;

  const auto json = status({"--nodes", idle + "," + busy, "--json"});
  ASSERT_EQ(json.status, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["address"], idle);
  EXPECT_EQ(j[0]["state"], "idle");
  EXPECT_EQ(j[0]["version"], "0.1.0");
  EXPECT_GT(j[0]["memory_bytes"].get<int64_t>(), 0);
  EXPECT_GE(j[0]["cores"].get<int>(), 1);
  EXPECT_GT(j[0]["bandwidth_gbs"].get<double>(), 0);
  EXPECT_FALSE(j[0]["cpu"].get<std::string>().empty());
  ASSERT_EQ(j[0]["cached"].size(), 1u);
  EXPECT_TRUE(std::regex_match(j[0]["cached"][0]["key"].get<std::string>(), std::regex("[0-9a-f]{64}")));
  EXPECT_EQ(j[1]["state"], "busy");
  EXPECT_EQ(j[1]["serving"].get<std::string>().rfind("127.0.0.1:", 0), 0u);

  // A worker that cannot be asked gets its line, the others theirs, and the status is 1.
  const auto partly = status({"--nodes", idle + ",127.0.0.1:1"});
  EXPECT_EQ(partly.status, 1);
  EXPECT_EQ(partly.out.rfind(idle + "  idle", 0), 0u) << partly.out;
  EXPECT_NE(partly.out.find("127.0.0.1:1  unreachable: worker 127.0.0.1:1: cannot connect: Connection refused"),
            std::string::npos)
      << partly.out;
  EXPECT_NE(partly.err.find("shardlm: error: status: 1 of 2 workers could not be asked"), std::string::npos)
      << partly.err;
  job->kill9();
}

// Three models' shards (1.2, 0.4 and 0.3 MB) through a cache that holds 1.7 MB.
TEST_F(StatusAndCache, CacheOverItsLimitRemovesTheLeastRecentlyUsedShard) {
  const std::string models = shardlm::test_paths::models_dir();
  const std::string big = models + "/stories260K.gguf", q8 = models + "/stories260K-Q8_0.gguf",
                    q4 = models + "/stories260K-Q4_0.gguf";
  const fs::path cache = dir_ / "cache";
  const std::string node = start_worker({"--cache-dir", cache.string(), "--cache-max-bytes", "1700000"});
  auto hits = [&] { return count_of(workers_[0]->err(), "is cached, no transfer"); };
  auto shards = [&] {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(cache)) n += e.path().extension() == ".gguf";
    return n;
  };
  for (const auto& model : {q8, q4, q8}) ASSERT_EQ(run_model(model, node).status, 0);
  EXPECT_EQ(hits(), 1u);  // the second q8 run
  EXPECT_EQ(shards(), 2u);
  // q4 is now the least recently used: the big one pushes it out, q8 stays.
  ASSERT_EQ(run_model(big, node).status, 0);
  EXPECT_EQ(shards(), 2u);
  EXPECT_NE(workers_[0]->err().find("removed the least recently used shard"), std::string::npos);
  ASSERT_EQ(run_model(q8, node).status, 0);
  EXPECT_EQ(hits(), 2u);
  ASSERT_EQ(run_model(q4, node).status, 0);
  EXPECT_EQ(hits(), 2u);  // q4 was sent again
  uint64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(cache)) {
    if (e.path().extension() != ".gguf") continue;  // the seals beside them are a few bytes
    struct stat st{};
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    bytes += uint64_t(st.st_blocks) * 512;
  }
  EXPECT_LE(bytes, 1700000u);
}

// A cached shard changed in place (its weights zeroed, the size kept) is not
// used as it is: the worker notices, fetches it again, and the text is right.
TEST_F(StatusAndCache, ACachedShardChangedInPlaceIsFetchedAgain) {
  const std::string model = std::string(shardlm::test_paths::models_dir()) + "/stories260K.gguf";
  const fs::path cache = dir_ / "cache";
  const std::string node = start_worker({"--cache-dir", cache.string()});
  const Result first = run_model(model, node);
  ASSERT_EQ(first.status, 0) << first.err;
  fs::path shard;
  for (const auto& e : fs::directory_iterator(cache))
    if (e.path().extension() == ".gguf") shard = e.path();
  ASSERT_FALSE(shard.empty());
  const Result hit = run_model(model, node);
  ASSERT_EQ(hit.status, 0) << hit.err;
  EXPECT_EQ(hit.out, first.out);
  EXPECT_EQ(count_of(workers_[0]->err(), "is cached, no transfer"), 1u);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(fs::file_size(shard) / 2));
    const std::string zeros(100000, '\0');
    f.write(zeros.data(), std::streamsize(zeros.size()));
  }
  const Result again = run_model(model, node);
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(again.out, first.out);
  EXPECT_EQ(count_of(workers_[0]->err(), "is cached, no transfer"), 1u);
  EXPECT_EQ(count_of(workers_[0]->err(), "has changed since it was stored; fetching it again"), 1u);
}

}  // namespace
