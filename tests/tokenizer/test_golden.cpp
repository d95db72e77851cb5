// Exact agreement with llama.cpp: the golden tokenize files (ids, pieces and
// detokenized text in all four add_special × parse_special modes) and
// llama.cpp's own .inp/.out vocabulary test vectors.
#include <nlohmann/json.hpp>

#include "tokenizer_test_util.h"

namespace shardlm::test {
namespace {

struct GoldenModel {
  const char* golden;  // file in golden/
  const char* model;   // path under the shared model folder
};

const GoldenModel kGoldenModels[] = {
    {"stories260K.tokenize.json", "stories260K.gguf"},
    {"llama-2-tiny-random.tokenize.json", "llama-2-tiny-random.gguf"},
    {"tiny-random-llama-bpe.tokenize.json", "tiny-random-llama-bpe.gguf"},
    {"tiny-random-qwen2.tokenize.json", "synthetic/tiny-random-qwen2.gguf"},
    {"ggml-vocab-llama-spm.tokenize.json", "vocab/ggml-vocab-llama-spm.gguf"},
    {"ggml-vocab-gpt-2.tokenize.json", "vocab/ggml-vocab-gpt-2.gguf"},
    {"ggml-vocab-deepseek-llm.tokenize.json", "vocab/ggml-vocab-deepseek-llm.gguf"},
    {"ggml-vocab-deepseek-coder.tokenize.json", "vocab/ggml-vocab-deepseek-coder.gguf"},
};

class GoldenTokenize : public ::testing::TestWithParam<GoldenModel> {};

TEST_P(GoldenTokenize, MatchesLlamaCppInAllModes) {
  const auto golden_path = shared_models() / "golden" / GetParam().golden;
  const Tokenizer* tok = tokenizer_for(shared_models() / GetParam().model);
  if (!tok || !std::filesystem::exists(golden_path)) GTEST_SKIP() << "shared models not found at " << shared_models();
  const auto golden = nlohmann::json::parse(read_text_file(golden_path));

  EXPECT_EQ(tok->n_vocab(), golden["n_vocab"].get<int>());
  EXPECT_EQ(tok->bos(), golden["bos_id"].get<int>());
  EXPECT_EQ(tok->eos(), golden["eos_id"].get<int>());
  EXPECT_EQ(tok->adds_bos(), golden["add_bos"].get<bool>());

  const std::pair<const char*, std::pair<bool, bool>> modes[] = {
      {"with_special", {true, false}},
      {"with_special_parse_special", {true, true}},
      {"no_special", {false, false}},
      {"no_special_parse_special", {false, true}},
  };
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"].get<std::string>();
    for (const auto& [mode, flags] : modes) {
      SCOPED_TRACE(std::string(mode) + " text=\"" + text + "\"");
      const auto& expected = c[mode];
      const auto ids = tok->encode(text, flags.first, flags.second);
      ASSERT_EQ(ids, expected["ids"].get<std::vector<TokenId>>());
      const auto hex = expected["pieces_hex"].get<std::vector<std::string>>();
      for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(to_hex(tok->token_to_piece(ids[i], true)), hex[i]) << "id " << ids[i];
      EXPECT_EQ(tok->decode(ids), expected["detokenized"].get<std::string>());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 64);
}

INSTANTIATE_TEST_SUITE_P(AllVocabularies, GoldenTokenize, ::testing::ValuesIn(kGoldenModels),
                         [](const auto& info) {
                           std::string name = info.param.golden;
                           name = name.substr(0, name.find(".tokenize"));
                           for (char& ch : name) if (!isalnum(uint8_t(ch))) ch = '_';
                           return name;
                         });

// llama.cpp's tests/test-tokenizer-0 vectors: inputs separated by a marker
// line; each .out line holds the expected ids (no BOS; add_special=false).
class VocabTestVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabTestVectors, MatchEveryLine) {
  const auto model = shared_models() / "vocab" / GetParam();
  const Tokenizer* tok = tokenizer_for(model);
  if (!tok) GTEST_SKIP() << "shared models not found at " << shared_models();
  const std::string inputs = read_text_file(model.string() + ".inp");
  const std::string outputs = read_text_file(model.string() + ".out");

  const std::string marker = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0, hit; (hit = inputs.find(marker, pos)) != std::string::npos; pos = hit + marker.size())
    texts.push_back(inputs.substr(pos, hit - pos));
  std::vector<std::vector<TokenId>> expected;
  std::istringstream lines(outputs);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream nums(line);
    std::vector<TokenId> ids;
    for (TokenId id; nums >> id;) ids.push_back(id);
    expected.push_back(ids);
  }
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GT(texts.size(), 40u);
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(tok->encode(texts[i], false, false), expected[i]) << "input " << i << ": \"" << texts[i] << "\"";
}

INSTANTIATE_TEST_SUITE_P(AllVocabularies, VocabTestVectors,
                         ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                           "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-deepseek-coder.gguf"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name = name.substr(11, name.size() - 16);  // between "ggml-vocab-" and ".gguf"
                           for (char& ch : name) if (!isalnum(uint8_t(ch))) ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace shardlm::test
