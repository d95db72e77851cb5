// A worker's shard holds every byte its rank reads: the rank's forward pass
// over the sparse shard equals the same rank's over the whole file, bit for
// bit, for every rank of tensor, expert and pipeline splits (a byte missing
// from the shard reads as zero and changes the numbers).
#include <gtest/gtest.h>

#include <filesystem>

#include "cluster/shard.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "parallel/planner.h"
#include "test_paths.h"

namespace shardlm::cluster {
namespace {

std::string model_path(const std::string& name) {
  const std::string top = std::string(shardlm::test_paths::models_dir()) + "/" + name;
  return std::filesystem::exists(top) ? top : std::string(shardlm::test_paths::models_dir()) + "/synthetic/" + name;
}

// This rank's output for a 5-token batch: logits on the last stage, else hidden states.
std::vector<float> rank_output(const gguf::File& file, const RankPlan& plan) {
  ModelOptions o;
  o.n_ctx = 8;
  o.n_batch = 5;
  o.n_outputs = 5;
  o.plan = plan;
  Model m(file, o);
  Batch b;
  for (int i = 0; i < 5; ++i) b.add(0, i, TokenId(3 + 7 * i), true);
  std::vector<float> hidden(size_t(5 * m.config().n_embd));
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float(int(i % 11) - 5) * 0.1f;
  m.forward(b, plan.first_stage() ? nullptr : hidden.data());
  if (!plan.last_stage(m.config())) return {m.hidden().begin(), m.hidden().end()};
  std::vector<float> out;
  for (size_t k = 0; k < 5; ++k) out.insert(out.end(), m.logits(k).begin(), m.logits(k).end());
  return out;
}

TEST(Shard, HoldsEveryByteOfItsRank) {
  struct Case {
    const char* model;
    int tp, pp;
    bool whole_experts;
  };
  for (const Case& c : {Case{"tiny-random-deepseek2.gguf", 2, 2, true}, Case{"tiny-random-deepseek2.gguf", 2, 1, false},
                        Case{"tiny-random-qwen3moe.gguf", 2, 1, true}, Case{"tiny-random-mixtral.gguf", 2, 2, false},
                        Case{"stories260K.gguf", 2, 2, false}}) {
    auto file = gguf::File::open(model_path(c.model));
    const auto plan = parallel::uniform_plan(*file, c.tp, c.pp, {}, parallel::default_node("127.0.0.1"), 1, {},
                                             c.whole_experts);
    const ModelConfig config = ModelConfig::from_gguf(*file);
    for (int r = 0; r < plan.size(); ++r) {
      SCOPED_TRACE(std::string(c.model) + " rank " + std::to_string(r) + ": " + plan.ranks[size_t(r)].to_string());
      const auto ranges = shard_ranges(*file, config, plan.ranks[size_t(r)]);
      const std::string path = ::testing::TempDir() + "shardlm_shard_test.gguf";
      {
        ShardWriter w(path, file->file_size());
        for (const auto& range : ranges) w.write_at(range.offset, file_bytes(*file) + range.offset, range.length);
        w.close();
      }
      EXPECT_LT(total_bytes(ranges), file->file_size());
      auto shard = gguf::File::open(path);
      EXPECT_EQ(rank_output(*shard, plan.ranks[size_t(r)]), rank_output(*file, plan.ranks[size_t(r)]));
      std::filesystem::remove(path);
    }
  }
}

}  // namespace
}  // namespace shardlm::cluster
