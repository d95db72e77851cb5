// Mixture-of-experts and latent-attention models on `shardlm worker`
// daemons: each worker receives only its experts' (or expert rows') bytes,
// and the story equals the single node's, for --ep and --tp.
#include <gtest/gtest.h>

#include "cluster/cluster_fixture.h"
#include "test_paths.h"

using namespace shardlm::test;

namespace {

class ClusterMoeTest : public ClusterTest {
 protected:
  Result run_model(const std::string& model, std::vector<std::string> args) {
    std::vector<std::string> argv = {shardlm::test_paths::shardlm_binary(), "run", "-m", model, "-p", "Once upon a time", "--temp", "0",
                                     "--seed", "1", "-t", "1", "-n", "24"};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string n = std::to_string(runs_++);
    Process p(argv, dir_ / ("moe" + n + ".out"), dir_ / ("moe" + n + ".err"), {kToken});
    const int status = p.wait();
    return {status, p.out(), p.err()};
  }
};

TEST_F(ClusterMoeTest, ExpertAndTensorParallelTellTheSameStoryAsSingleNode) {
  const std::string nodes = start_worker() + "," + start_worker();
  for (const char* name : {"tiny-random-qwen3moe.gguf", "tiny-random-deepseek2.gguf"}) {
    const std::string model = std::string(shardlm::test_paths::models_dir()) + "/synthetic/" + name;
    const auto expected = run_model(model, {});
    ASSERT_EQ(expected.status, 0) << expected.err;
    for (const char* split : {"--ep", "--tp"}) {
      SCOPED_TRACE(std::string(name) + " " + split);
      const auto r = run_model(model, {"--nodes", nodes, split, "2", "--pp", "1"});
      ASSERT_EQ(r.status, 0) << r.err;
      EXPECT_EQ(r.out, expected.out);
      EXPECT_NE(r.err.find("cluster: 2 workers, tp 2 × pp 1"), std::string::npos) << r.err;
    }
  }
}

}  // namespace
