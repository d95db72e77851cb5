// What the loaded weights keep resident of the mapped file: only the pages of
// matrices still read from it (ModelWeights::release_unread_file_pages); by
// default none but the token embedding (ModelWeights::read_into_memory), with
// the same logits as read from the mapping, expert stacks of a rank that
// holds a slice of every expert included.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "core/memory_usage.h"
#include "model/plan.h"
#include "model_test_util.h"

namespace shardlm::test {
namespace {

bool inside(const void* p, const gguf::File& f) {
  const auto at = reinterpret_cast<uintptr_t>(p), begin = reinterpret_cast<uintptr_t>(f.bytes());
  return at >= begin && at < begin + f.file_size();
}

// Bytes of the matrices the model still reads from the file, each rounded
// out to whole pages.
int64_t file_bytes_still_read(const ModelWeights& w, const gguf::File& f) {
  const auto page = int64_t(sysconf(_SC_PAGESIZE));
  int64_t n = 0;
  const auto add = [&](const MatrixView& m) {
    if (m.data && inside(m.data, f)) n += int64_t(m.row_stride) * m.rows + 2 * page;
  };
  w.for_each_matrix(1, [&](const MatrixView& m, double, bool) { add(m); });
  if (w.token_embd.data != w.output.data) add(w.token_embd);
  return n;
}

void expect_only_read_pages_resident(const std::string& name, bool in_memory) {
  SCOPED_TRACE(name);
  ModelOptions o;
  o.weights_in_memory = in_memory;
  Loaded m(model_path(name), 1, o);
  m.prompt({1, 2, 3, 4, 5}, false);
  m.step(6, 5);
  const auto& w = m.model->weights();
  for (const auto& L : w.layers) {
    EXPECT_FALSE(inside(L.attn_norm, *m.file));
    EXPECT_FALSE(inside(L.ffn_norm, *m.file));
  }
  EXPECT_FALSE(inside(w.output_norm, *m.file));
  if (in_memory)  // all but the embedding's lookups
    w.for_each_matrix(1, [&](const MatrixView& mv, double, bool) { EXPECT_FALSE(inside(mv.data, *m.file)); });
  const int64_t resident = mapped_resident_bytes(m.file->bytes(), m.file->file_size());
  ASSERT_GE(resident, 0) << "/proc/self/pagemap unavailable";
  EXPECT_LE(resident, file_bytes_still_read(w, *m.file))
      << "of a " << m.file->file_size() << "-byte file, " << w.owned_bytes() << " bytes copied";
}

TEST(WeightsMemory, OnlyPagesOfMatricesReadFromTheFileStayMapped) {
  for (const bool in_memory : {false, true}) {
    expect_only_read_pages_resident("stories260K-Q4_0.gguf", in_memory);
    expect_only_read_pages_resident("stories260K-Q8_0.gguf", in_memory);
    expect_only_read_pages_resident("tiny-random-llama-kq-Q4_K_M.gguf", in_memory);
  }
}

// Logits of a few tokens with the weights read into memory and from the
// mapping: the same bits. Expert stacks and latent attention's per-head
// matrices are copied too; `plan` may hold a slice of every expert.
void expect_same_logits_in_memory(const std::string& path, std::optional<RankPlan> plan = std::nullopt) {
  SCOPED_TRACE(path);
  std::vector<std::vector<float>> logits[2];
  for (const bool in_memory : {false, true}) {
    ModelOptions o;
    o.weights_in_memory = in_memory;
    o.plan = plan;
    o.n_outputs = 5;
    Loaded m(path, 1, o);
    if (in_memory) {
      m.model->weights().for_each_matrix(1, [&](const MatrixView& mv, double, bool) {
        EXPECT_FALSE(inside(mv.data, *m.file)) << mv.rows << "x" << mv.cols;
      });
    }
    logits[in_memory] = m.prompt({1, 2, 3, 4, 5}, true);
    logits[in_memory].push_back(m.step(6, 5));
  }
  EXPECT_EQ(logits[0], logits[1]);
}

TEST(WeightsMemory, WeightsReadIntoMemoryGiveTheMappedWeightsLogits) {
  expect_same_logits_in_memory(model_path("tiny-random-llama-kq-Q4_K_M.gguf"));
  expect_same_logits_in_memory(model_path("tiny-random-qwen3moe.gguf"));
  expect_same_logits_in_memory(model_path("tiny-random-deepseek2.gguf"));
  // Half of every expert's rows: the stack's held rows are not contiguous in the file.
  auto file = gguf::File::open(model_path("tiny-random-qwen3moe.gguf"));
  const auto cfg = ModelConfig::from_gguf(*file);
  RankPlan p = RankPlan::whole(cfg);
  p.expert_rows = {cfg.moe.n_ff_expert / 2, cfg.moe.n_ff_expert};
  p.experts = {1, cfg.moe.n_expert - 1};
  expect_same_logits_in_memory(model_path("tiny-random-qwen3moe.gguf"), p);
}

}  // namespace
}  // namespace shardlm::test
