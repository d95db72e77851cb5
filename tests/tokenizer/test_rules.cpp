// Vocabulary rules on small synthetic GGUF files: special-token parsing,
// BOS/EOS flags, end-of-generation detection, and one-line errors for bad
// vocabularies.
#include <gmock/gmock.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "tokenizer_test_util.h"

namespace shardlm::test {
namespace {

using gguf::Array;
using gguf::Value;
using gguf::ValueType;

Value string_array(const std::vector<std::string>& items) {
  auto a = std::make_shared<Array>();
  a->type = ValueType::STRING;
  for (const auto& s : items) a->items.emplace_back(s);
  return a;
}

Value int_array(const std::vector<int32_t>& items) {
  auto a = std::make_shared<Array>();
  a->type = ValueType::INT32;
  for (int32_t v : items) a->items.emplace_back(v);
  return a;
}

Value float_array(const std::vector<float>& items) {
  auto a = std::make_shared<Array>();
  a->type = ValueType::FLOAT32;
  for (float v : items) a->items.emplace_back(v);
  return a;
}

const std::string kSpace = "\xE2\x96\x81";

// A SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then a few pieces.
struct SpmVocab {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types{2, 3, 3};
  std::vector<float> scores{0, 0, 0};
  SpmVocab() {
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      add(hex, 6);
    }
    for (const char* piece : {"a", "b", "x", "y", "z", "w"}) add(piece);
    add(kSpace);
    add("ab", 1, 5.0f);
    add(kSpace + "ab", 1, 6.0f);
    add("xy", 4);           // USER_DEFINED
    add("yzw", 4);          // USER_DEFINED, longer: cut first
    add("<|im_end|>", 1);   // NORMAL in the file, an end-of-turn marker by name
    add("<ctl>", 3);        // CONTROL
  }
  TokenId add(const std::string& text, int32_t gguf_type = 1, float score = 0.0f) {
    tokens.push_back(text);
    types.push_back(gguf_type);
    scores.push_back(score);
    return TokenId(tokens.size() - 1);
  }
  TokenId id(const std::string& text) const {
    return TokenId(std::find(tokens.begin(), tokens.end(), text) - tokens.begin());
  }
};

class VocabFile {
 public:
  explicit VocabFile(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".gguf")) {}
  ~VocabFile() { std::filesystem::remove(path_); }
  void write(const std::vector<std::pair<std::string, Value>>& kv) {
    gguf::Writer w(path_.string());
    for (const auto& [k, v] : kv) w.set(k, v);
    w.finish();
  }
  std::unique_ptr<Tokenizer> load() {
    auto file = gguf::File::open(path_.string());
    return Tokenizer::from_gguf(*file);
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

std::vector<std::pair<std::string, Value>> spm_metadata(const SpmVocab& v) {
  return {{"tokenizer.ggml.model", std::string("llama")},
          {"tokenizer.ggml.tokens", string_array(v.tokens)},
          {"tokenizer.ggml.scores", float_array(v.scores)},
          {"tokenizer.ggml.token_type", int_array(v.types)}};
}

std::string error_of(VocabFile& f) {
  try {
    f.load();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerRules, UserDefinedTokensAreAlwaysCutControlOnlyOnRequest) {
  SpmVocab v;
  VocabFile f("spm-rules");
  f.write(spm_metadata(v));
  auto tok = f.load();
  EXPECT_EQ(tok->kind(), "llama");
  EXPECT_EQ(tok->encode("xy", false, false), (std::vector<TokenId>{v.id("xy")}));
  const auto plain = tok->encode("<ctl>", false, false);
  EXPECT_THAT(plain, ::testing::Not(::testing::Contains(v.id("<ctl>"))));
  EXPECT_EQ(tok->encode("<ctl>", false, true), (std::vector<TokenId>{v.id("<ctl>")}));
  // The longer special text wins even though the shorter one starts earlier.
  const auto ids = tok->encode("xyzw", false, false);
  EXPECT_THAT(ids, ::testing::Contains(v.id("yzw")));
  EXPECT_THAT(ids, ::testing::Not(::testing::Contains(v.id("xy"))));
  // Text after a special token gets the space prefix again; "▁ab" outranks "ab".
  EXPECT_EQ(tok->encode("<ctl>ab", false, true), (std::vector<TokenId>{v.id("<ctl>"), v.id(kSpace + "ab")}));
}

TEST(TokenizerRules, DefaultsAndFlagsFromMetadata) {
  SpmVocab v;
  VocabFile f("spm-flags");
  auto kv = spm_metadata(v);
  kv.push_back({"tokenizer.ggml.bos_token_id", uint32_t(0xFFFFFFFF)});  // "none": default BOS 1 stays
  kv.push_back({"tokenizer.ggml.add_eos_token", true});
  f.write(kv);
  auto tok = f.load();
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->adds_bos());
  const auto ids = tok->encode("ab", true, false);
  EXPECT_EQ(ids, (std::vector<TokenId>{1, v.id(kSpace + "ab"), 2}));
  // BOS renders as nothing but still ends the first-token space stripping (llama.cpp).
  EXPECT_EQ(tok->decode(ids), " ab");
  EXPECT_EQ(tok->decode({v.id(kSpace + "ab")}), "ab");
  EXPECT_EQ(tok->decode(ids, true), "<s> ab</s>");
  EXPECT_TRUE(tok->is_end_of_generation(2));
  EXPECT_TRUE(tok->is_end_of_generation(v.id("<|im_end|>")));
  EXPECT_FALSE(tok->is_end_of_generation(v.id("ab")));
  // The end-of-turn marker became a control token: parsed only on request, hidden in text.
  EXPECT_EQ(tok->encode("<|im_end|>", false, true), (std::vector<TokenId>{v.id("<|im_end|>")}));
  EXPECT_EQ(tok->token_to_piece(v.id("<|im_end|>"), false), "");
  EXPECT_EQ(tok->token_text(v.id("ab")), "ab");
}

TEST(TokenizerRules, AddBosFalseAndUnknownCharactersFallBackToBytes) {
  SpmVocab v;
  VocabFile f("spm-nobos");
  auto kv = spm_metadata(v);
  kv.push_back({"tokenizer.ggml.add_bos_token", false});
  f.write(kv);
  auto tok = f.load();
  EXPECT_FALSE(tok->adds_bos());
  const auto ids = tok->encode("\xC3\xA9", true, false);  // é: not a piece → ▁ then two byte tokens
  EXPECT_EQ(ids, (std::vector<TokenId>{v.id(kSpace), v.id("<0xC3>"), v.id("<0xA9>")}));
  EXPECT_EQ(tok->decode(ids), "\xC3\xA9");
}

TEST(TokenizerRules, BadVocabulariesGiveOneLineErrors) {
  SpmVocab v;
  {
    VocabFile f("bad-model");
    auto kv = spm_metadata(v);
    kv[0].second = std::string("bert");
    f.write(kv);
    EXPECT_THAT(error_of(f), ::testing::AllOf(::testing::HasSubstr(f.path()), ::testing::HasSubstr("'bert'")));
  }
  {
    VocabFile f("no-tokens");
    f.write({{"tokenizer.ggml.model", std::string("llama")}});
    EXPECT_THAT(error_of(f), ::testing::HasSubstr("tokenizer.ggml.tokens"));
  }
  {
    VocabFile f("short-types");
    auto kv = spm_metadata(v);
    kv[3].second = int_array({1, 1});
    f.write(kv);
    EXPECT_THAT(error_of(f), ::testing::HasSubstr("tokenizer.ggml.token_type"));
  }
  {
    VocabFile f("no-merges");
    f.write({{"tokenizer.ggml.model", std::string("gpt2")}, {"tokenizer.ggml.tokens", string_array({"a", "b"})}});
    EXPECT_THAT(error_of(f), ::testing::HasSubstr("tokenizer.ggml.merges"));
  }
  {
    VocabFile f("range");
    f.write(spm_metadata(v));
    auto tok = f.load();
    EXPECT_THROW(tok->token_to_piece(-1), Error);
    EXPECT_THROW(tok->token_to_piece(tok->n_vocab()), Error);
    EXPECT_THROW(tok->decode({0, 99999}), Error);
  }
}

// A byte-level BPE vocabulary with an unrecognised pre-tokenizer name: it
// falls back to the default regexes (as llama.cpp does) and still merges.
TEST(TokenizerRules, BpeUnknownPreTokenizerFallsBackToDefault) {
  VocabFile f("bpe-unknown-pre");
  f.write({{"tokenizer.ggml.model", std::string("gpt2")},
           {"tokenizer.ggml.pre", std::string("no-such-pre")},
           {"tokenizer.ggml.tokens", string_array({"h", "i", "hi", "\xC4\xA0", "\xC4\xA0hi", "!", "<|endoftext|>"})},
           {"tokenizer.ggml.merges", string_array({"h i", "\xC4\xA0 hi"})}});
  auto tok = f.load();
  EXPECT_EQ(tok->kind(), "gpt2");
  EXPECT_EQ(tok->encode("hi hi!", false, false), (std::vector<TokenId>{2, 4, 5}));
  EXPECT_EQ(tok->decode({2, 4, 5}), "hi hi!");
  EXPECT_EQ(tok->encode("hi ! ", false, false), (std::vector<TokenId>{2, 3, 5, 3}));
  EXPECT_EQ(tok->decode({2, 3, 5}), "hi!");  // clean-up of " !" as llama.cpp does
  EXPECT_TRUE(tok->is_end_of_generation(6));
  EXPECT_EQ(tok->bos(), -1);  // the gpt2 default id 11 does not exist here
  // Characters with no token at all are dropped rather than crashing.
  EXPECT_EQ(tok->encode("\xff" "q", false, false), (std::vector<TokenId>{}));
}

}  // namespace
}  // namespace shardlm::test
