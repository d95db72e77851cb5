// Properties of the forward pass that the golden files do not cover: batching
// several sequences, chunked prompts, pipeline stages, tensor-parallel ranks,
// the F16 KV cache and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "model_test_util.h"

namespace shardlm::test {
namespace {

const std::vector<TokenId> kPromptA{1, 403, 407, 261, 378};  // "Once upon a time" in stories260K
const std::vector<TokenId> kPromptB{1, 306, 229, 459};
const std::vector<TokenId> kPromptC{1, 88, 312, 270, 433, 261, 290};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

std::string stories() { return model_path("stories260K.gguf"); }

TEST(Forward, SeveralSequencesInOneBatchMatchEachAlone) {
  const std::vector<std::vector<TokenId>> prompts{kPromptA, kPromptB, kPromptC};
  // Alone: prompt, then one decode step of token 500.
  std::vector<std::vector<float>> alone_prompt, alone_step;
  for (const auto& p : prompts) {
    Loaded m(stories(), 1);
    alone_prompt.push_back(m.prompt(p, false)[0]);
    alone_step.push_back(m.step(500, int32_t(p.size())));
  }
  ModelOptions opt;
  opt.n_seq = 3;
  Loaded m(stories(), 1, opt);
  Batch b;  // entries of the three sequences interleaved
  for (size_t i = 0; i < 7; ++i)
    for (size_t s = 0; s < 3; ++s)
      if (i < prompts[s].size()) b.add(int32_t(s), int32_t(i), prompts[s][i], i + 1 == prompts[s].size());
  m.model->forward(b);
  for (size_t s = 0; s < 3; ++s) {
    auto l = m.model->logits(s);  // logits come in batch order: A (i=4), B (i=3), C (i=6)
    const size_t which = s == 0 ? 1 : s == 1 ? 0 : 2;
    EXPECT_LT(max_abs_diff({l.begin(), l.end()}, alone_prompt[which]), 1e-5) << "sequence " << which;
  }
  b.clear();
  for (size_t s = 0; s < 3; ++s) b.add(int32_t(s), int32_t(prompts[s].size()), 500, true);
  m.model->forward(b);
  for (size_t s = 0; s < 3; ++s) {
    auto l = m.model->logits(s);
    EXPECT_LT(max_abs_diff({l.begin(), l.end()}, alone_step[s]), 1e-5) << "sequence " << s;
  }
}

// A batch-invariant model serving several sequences gives a request the
// same bits whatever shares its steps: its prompt as one batch, interleaved
// with two others' prompts, or in chunks of 1, 3 and 7 tokens beside
// others' tokens (a prompt token attended alone: ops::SumOrder::AsBlocks),
// then decoded alone or beside 1-6 other entries. Models whose matrices are
// all quantized 16-row panels, and models with row-major ones a token at a
// time (F32, rows not in 16s; a mixture of experts, latent attention).
TEST(Forward, SeveralSequencesGiveARequestTheSameBitsWhateverItsCompany) {
  const std::vector<TokenId> prompt{1, 403, 407, 261, 378, 88, 312, 270, 433, 261, 290};
  const std::vector<TokenId> decoded{500, 501, 502};
  ModelOptions opt;
  opt.n_seq = 3;
  opt.batch_invariant = true;
  for (const char* name : {"tiny-random-llama-kq-Q4_K_M.gguf", "synthetic/tiny-random-qwen3-Q8_0.gguf", "stories260K-Q4_0.gguf",
                           "stories260K.gguf", "synthetic/tiny-random-qwen3moe.gguf", "synthetic/tiny-random-deepseek2.gguf"}) {
    SCOPED_TRACE(name);
    // Sequence 0's logits after its prompt, then after each decoded token;
    // `company` adds other sequences' entries before each of its own.
    const auto run = [&](const std::vector<int64_t>& chunks, bool company) {
      Loaded m(model_path(name), 1, opt);
      std::vector<std::vector<float>> got;
      const auto forward = [&](Batch& b) {
        m.model->forward(b);
        for (size_t k = 0; k < b.size(); ++k) {
          if (b.entries[k].seq != 0 || !b.entries[k].want_logits) continue;
          size_t index = 0;
          for (size_t j = 0; j < k; ++j) index += b.entries[j].want_logits;
          auto l = m.model->logits(index);
          got.emplace_back(l.begin(), l.end());
        }
      };
      int32_t other_pos = 0;
      size_t at = 0;
      for (int64_t n : chunks) {
        Batch b;
        for (int64_t i = 0; i < n; ++i, ++at) {
          if (company) b.add(1 + int32_t(at % 2), other_pos + int32_t(i / 2), kPromptC[at % kPromptC.size()], i == 0);
          b.add(0, int32_t(at), prompt[at], at + 1 == prompt.size());
        }
        other_pos += int32_t(n);
        forward(b);
      }
      // Decode steps beside 1..6 other entries: the matrix products then
      // take their one-token and their batched paths.
      for (size_t i = 0; i < decoded.size(); ++i) {
        Batch b;
        if (company) b.add(2, other_pos++, 300, true);
        b.add(0, int32_t(prompt.size() + i), decoded[i], true);
        for (size_t k = 0; company && k < 2 * i + 1; ++k) b.add(1, other_pos++, TokenId(301 + k), false);
        forward(b);
      }
      return got;
    };
    const auto alone = run({int64_t(prompt.size())}, false);
    ASSERT_EQ(alone.size(), 1 + decoded.size());
    for (const auto& [chunks, company] : {std::pair{std::vector<int64_t>{11}, true}, std::pair{std::vector<int64_t>{1, 3, 7}, true},
                                          std::pair{std::vector<int64_t>{1, 3, 7}, false}}) {
      const auto got = run(chunks, company);
      ASSERT_EQ(got.size(), alone.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(0, std::memcmp(got[i].data(), alone[i].data(), got[i].size() * sizeof(float)))
            << "logits " << i << " (0: the prompt's), chunks of " << chunks[0] << (company ? ", with company" : "");
    }
  }
}

TEST(Forward, PromptInChunksEqualsOneBatch) {
  Loaded whole(stories(), 1);
  const auto expected = whole.prompt(kPromptC, false)[0];
  Loaded chunked(stories(), 1);
  Batch b;
  for (int32_t i = 0; i < 4; ++i) b.add(0, i, kPromptC[size_t(i)], false);
  chunked.model->forward(b);
  b.clear();
  for (int32_t i = 4; i < 7; ++i) b.add(0, i, kPromptC[size_t(i)], i == 6);
  chunked.model->forward(b);
  auto l = chunked.model->logits(0);
  // The 3-token chunk runs the float decode kernel, the 7 tokens together the
  // prefill tiles: the same sums in another order, rounded differently.
  EXPECT_LT(max_abs_diff({l.begin(), l.end()}, expected), 3e-5);
}

TEST(Forward, PipelineStagesHandOffHiddenStates) {
  ModelOptions all_logits;
  all_logits.n_outputs = 8;
  Loaded whole(stories(), 1, all_logits);
  const auto expected = whole.prompt(kPromptA, true);
  auto file = gguf::File::open(stories());
  const auto cfg = ModelConfig::from_gguf(*file);
  ModelOptions o1, o2;
  o1.plan = o2.plan = RankPlan::whole(cfg);
  o1.plan->layers = {0, 2};
  o2.plan->layers = {2, 5};
  o1.n_outputs = o2.n_outputs = 8;
  Model stage1(*file, o1), stage2(*file, o2);
  Batch b;
  for (size_t i = 0; i < kPromptA.size(); ++i) b.add(0, int32_t(i), kPromptA[i], true);
  stage1.forward(b);
  EXPECT_THROW(stage1.logits(0), Error);  // not the last stage
  const auto hidden = stage1.hidden();
  ASSERT_EQ(hidden.size(), kPromptA.size() * 64);
  const std::vector<float> handed(hidden.begin(), hidden.end());
  stage2.forward(b, handed.data());
  for (size_t p = 0; p < kPromptA.size(); ++p) {
    auto l = stage2.logits(p);
    EXPECT_EQ(std::vector<float>(l.begin(), l.end()), expected[p]) << "position " << p;
  }
}

// Two tensor-parallel ranks on two threads; the all-reduce hook sums their
// partial results through shared memory. Concatenated logit slices must equal
// the whole model's up to summation order.
void check_tensor_parallel(const std::string& path, double tol) {
  auto file = gguf::File::open(path);
  const auto cfg = ModelConfig::from_gguf(*file);
  std::vector<std::vector<float>> expected;
  {
    Loaded whole(path, 1);
    expected = whole.prompt(kPromptA, false);
  }
  std::vector<float> partial[2];
  std::barrier sync(2);
  std::vector<float> logits[2];
  auto rank = [&](int r) {
    RankPlan p = RankPlan::whole(cfg);
    auto half = [r](int64_t n) { return Range{r * n / 2, (r + 1) * n / 2}; };
    p.kv_heads = half(cfg.n_head_kv);
    p.heads = {p.kv_heads.begin * cfg.n_group(), p.kv_heads.end * cfg.n_group()};
    p.ff_rows = half(cfg.n_ff);
    p.vocab_rows = half(cfg.n_vocab);
    ModelOptions o;
    o.plan = p;
    o.hooks.all_reduce = [&, r](float* data, size_t n) {
      partial[r].assign(data, data + n);
      sync.arrive_and_wait();
      for (size_t i = 0; i < n; ++i) data[i] = partial[0][i] + partial[1][i];  // same order on both ranks
      sync.arrive_and_wait();
    };
    Model m(*file, o);
    Batch b;
    for (size_t i = 0; i < kPromptA.size(); ++i) b.add(0, int32_t(i), kPromptA[i], i + 1 == kPromptA.size());
    m.forward(b);
    auto l = m.logits(0);
    logits[r].assign(l.begin(), l.end());
  };
  std::thread t1(rank, 1);
  rank(0);
  t1.join();
  std::vector<float> joined = logits[0];
  joined.insert(joined.end(), logits[1].begin(), logits[1].end());
  EXPECT_LT(max_abs_diff(joined, expected[0]), tol);
}

TEST(Forward, TensorParallelRanksMatchWholeModelLlama) { check_tensor_parallel(stories(), 1e-4); }
TEST(Forward, TensorParallelRanksMatchWholeModelQwen2) {
  check_tensor_parallel(model_path("tiny-random-qwen2.gguf"), 1e-3);
}
TEST(Forward, TensorParallelRanksMatchWholeModelQwen3) {
  check_tensor_parallel(model_path("tiny-random-qwen3.gguf"), 1e-4);
}

// Several sequences' prompts, then decode steps of all of them in one batch
// (a per-token split of norms, RoPE, SwiGLU and adds, the cache filled per KV
// head): every thread count gives the same bits. Llama, Qwen2 (QKV biases)
// and Qwen3 (Q/K norms), with an F16 cache.
void check_threads_bit_identical(const std::string& path) {
  const std::vector<std::vector<TokenId>> prompts{kPromptA, kPromptB, kPromptC};
  auto run = [&](int threads) {
    ModelOptions opt;
    opt.n_seq = 3;
    opt.kv_type = DType::F16;
    Loaded m(path, threads, opt);
    std::vector<std::vector<float>> out;
    Batch b;
    for (size_t s = 0; s < 3; ++s)
      for (size_t i = 0; i < prompts[s].size(); ++i)
        b.add(int32_t(s), int32_t(i), prompts[s][i], i + 1 == prompts[s].size());
    for (int step = 0; step < 3; ++step) {
      m.model->forward(b);
      for (size_t k = 0; k < 3; ++k) out.emplace_back(m.model->logits(k).begin(), m.model->logits(k).end());
      b.clear();
      for (size_t s = 0; s < 3; ++s) b.add(int32_t(s), int32_t(prompts[s].size()) + step, TokenId(7 + 5 * s + step), true);
    }
    return out;
  };
  const auto one = run(1);
  EXPECT_EQ(run(2), one) << path << ": 2 threads";
  EXPECT_EQ(run(3), one) << path << ": 3 threads";
}

TEST(Forward, BatchedDecodeIsBitIdenticalAcrossThreadCounts) {
  check_threads_bit_identical(stories());
  check_threads_bit_identical(model_path("tiny-random-qwen2.gguf"));
  check_threads_bit_identical(model_path("tiny-random-qwen3.gguf"));
}

TEST(Forward, F16KvCacheStaysCloseToF32) {
  Loaded f32(stories(), 1);
  ModelOptions opt;
  opt.kv_type = DType::F16;
  Loaded f16(stories(), 1, opt);
  auto a = f32.prompt(kPromptA, false)[0];
  auto b = f16.prompt(kPromptA, false)[0];
  const double d = max_abs_diff(a, b);
  EXPECT_GT(d, 0.0);   // the cache really is F16
  EXPECT_LT(d, 0.02);  // llama.cpp's own F16-cache difference on this model is 0.0095
  EXPECT_EQ(f16.model->kv_cache().bytes() * 2, f32.model->kv_cache().bytes());
}

TEST(Forward, KvCacheIsSizedByContextNotTrainingLength) {
  ModelOptions opt;
  opt.n_ctx = 64;
  opt.n_seq = 2;
  Loaded m(model_path("tiny-random-llama31.gguf"), 1, opt);  // trained for 131072 positions
  // 2 layers × 2 sequences × 64 positions × (2 KV heads × 16) × (K + V) × 4 bytes
  EXPECT_EQ(m.model->kv_cache().bytes(), size_t(2 * 2 * 64 * 32 * 2 * 4));
}

TEST(Forward, RejectsOutOfRangeEntries) {
  ModelOptions opt;
  opt.n_ctx = 16;
  opt.n_batch = 4;
  Loaded m(stories(), 1, opt);
  auto fails = [&](std::vector<BatchEntry> entries) {
    Batch b;
    b.entries = std::move(entries);
    EXPECT_THROW(m.model->forward(b), Error);
  };
  fails({});
  fails({{1, 0, 1, true}});     // sequence 1 of 1
  fails({{0, 16, 1, true}});    // position beyond --ctx
  fails({{0, 0, 512, true}});   // token outside the vocabulary
  fails({{0, 0, -1, true}});
  fails({{0, 0, 1, false}, {0, 1, 1, false}, {0, 2, 1, false}, {0, 3, 1, false}, {0, 4, 1, false}});  // > n_batch
  fails({{0, 0, 1, true}, {0, 1, 1, true}});  // more logits than n_outputs (= n_seq)
  Batch ok;
  ok.add(0, 0, 1, true);
  std::vector<float> hidden(64);
  EXPECT_THROW(m.model->forward(ok, hidden.data()), Error);  // the first stage takes tokens
  m.model->forward(ok);
  EXPECT_EQ(m.model->logits(0).size(), 512u);
}

TEST(Forward, RejectsInconsistentPlans) {
  auto file = gguf::File::open(stories());
  const auto cfg = ModelConfig::from_gguf(*file);
  RankPlan p = RankPlan::whole(cfg);
  p.heads = {0, 3};  // not whole KV groups of 2
  ModelOptions o;
  o.plan = p;
  EXPECT_THROW(Model(*file, o), Error);
  p = RankPlan::whole(cfg);
  p.layers = {3, 7};
  o.plan = p;
  EXPECT_THROW(Model(*file, o), Error);
}

TEST(Forward, QuantizedColumnSplitMustFollowBlocks) {
  auto file = gguf::File::open(model_path("stories260K-Q8_0.gguf"));
  const auto cfg = ModelConfig::from_gguf(*file);
  RankPlan p = RankPlan::whole(cfg);
  p.kv_heads = {0, 1};
  p.heads = {0, 2};  // attn_output columns [0, 16): not whole Q8_0 blocks of 32
  ModelOptions o;
  o.plan = p;
  try {
    Model m(*file, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn_output.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardlm::test
