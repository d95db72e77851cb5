// A worker's shard holds every byte its rank reads: the rank's forward pass
// over the sparse shard equals the same rank's over the whole file, bit for
// bit, for every rank of tensor, expert and pipeline splits (a byte missing
// from the shard reads as zero and changes the numbers).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <unistd.h>

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

namespace shardlm::cluster {
namespace {

// A model of one f32 tensor of `floats` ones, and a copy of it damaged by `damage`.
std::string fingerprint_of(const std::filesystem::path& path, size_t floats,
                           const std::function<void(std::vector<float>&)>& damage = {}) {
  std::vector<float> data(floats, 1.0f);
  if (damage) damage(data);
  {
    gguf::Writer w(path.string());
    w.set("general.architecture", gguf::Value(std::string("llama")));
    w.add_tensor("t.weight", DType::F32, {int64_t(floats)});
    w.begin_data();
    w.write_tensor_data("t.weight", data.data(), data.size() * sizeof(float));
    w.finish();
  }
  return model_fingerprint(*gguf::File::open(path.string()));
}

// What a --worker-model copy damaged in place (same size) must not pass for:
// a download cut short and zero-filled, in a small file a single value.
TEST(ModelFingerprint, DamagedCopiesDiffer) {
  const auto dir = std::filesystem::temp_directory_path() / ("shardlm-fingerprint-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const size_t large = size_t(12) << 20, small = size_t(100) << 10;  // 48 MiB (sampled), 400 KiB (hashed whole)
  const std::string whole = fingerprint_of(dir / "a.gguf", large);
  EXPECT_EQ(fingerprint_of(dir / "b.gguf", large), whole);
  EXPECT_NE(fingerprint_of(dir / "b.gguf", large, [](auto& d) { std::fill(d.end() - d.size() / 500, d.end(), 0.0f); }), whole)
      << "the last 0.2 % zeroed";
  EXPECT_NE(fingerprint_of(dir / "b.gguf", large, [](auto& d) { std::fill(d.begin() + d.size() / 3, d.begin() + d.size() / 3 + d.size() / 500, 0.0f); }), whole)
      << "0.2 % zeroed in the middle";
  const std::string small_whole = fingerprint_of(dir / "c.gguf", small);
  EXPECT_NE(fingerprint_of(dir / "d.gguf", small, [](auto& d) { d[12345] = 2.0f; }), small_whole) << "one value of a small file";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardlm::cluster
