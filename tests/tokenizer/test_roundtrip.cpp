// decode(encode(text)) gives the text back, for pseudo-random mixes of
// ASCII, whitespace, digits, accents, CJK and emoji (fixed seed), on
// vocabularies that do not rewrite spaces when decoding.
#include <random>

#include "tokenizer_test_util.h"

namespace shardlm::test {
namespace {

std::string random_text(std::mt19937& rng) {
  static const char* const kParts[] = {"a", "Z", "hello", " ", "  ", "\n", "\t", "\r\n", "7", "2024", "3.14", ",",
                                       "!?", "'s", "don't", "<s>", "</s>", "<|endoftext|>", "é", "ñ", "Ü", "日本",
                                       "語", "中文", "😀", "🚀", "👍🏽", "❤️", "\xE2\x80\x83", "\xC2\xA0", "_", "{}"};
  std::uniform_int_distribution<size_t> pick(0, std::size(kParts) - 1), count(0, 12);
  std::string s;
  for (size_t n = count(rng); n > 0; --n) s += kParts[pick(rng)];
  return s;
}

class RoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(RoundTrip, DecodeOfEncodeIsIdentity) {
  const Tokenizer* tok = tokenizer_for(shared_models() / GetParam());
  if (!tok) GTEST_SKIP() << "shared models not found at " << shared_models();
  std::mt19937 rng(12345);
  for (int i = 0; i < 150; ++i) {
    const std::string text = random_text(rng);
    const auto ids = tok->encode(text, false, false);
    ASSERT_EQ(tok->decode(ids), text) << "case " << i << ": \"" << text << "\"";
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, RoundTrip,
                         ::testing::Values("stories260K.gguf", "llama-2-tiny-random.gguf",
                                           "synthetic/tiny-random-qwen2.gguf", "vocab/ggml-vocab-deepseek-llm.gguf",
                                           "vocab/ggml-vocab-deepseek-coder.gguf"),
                         [](const auto& info) {
                           std::string name = std::filesystem::path(info.param).stem().string();
                           for (char& ch : name) if (!isalnum(uint8_t(ch))) ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace shardlm::test
