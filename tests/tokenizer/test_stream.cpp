// StreamDecoder never emits half a UTF-8 character, and its concatenated
// output equals decode() on real vocabularies where characters are split
// over byte tokens (SentencePiece) or byte-level pieces (GPT-2 BPE).
#include "tokenizer/unicode_text.h"
#include "tokenizer_test_util.h"

namespace shardlm::test {
namespace {

bool is_complete_utf8(std::string_view s) {
  bool incomplete = false;
  return text::complete_utf8_prefix(s, incomplete) == s.size() && !incomplete;
}

const std::string kMultiByteText = "日本語のテキスト 😀🚀👍🏽 ❤️ héllo ñ";

void expect_stream_matches_decode(const Tokenizer& tok, const std::vector<TokenId>& ids, std::string_view expected) {
  StreamDecoder stream(tok);
  std::string joined;
  int held_back = 0;
  for (const TokenId id : ids) {
    const std::string chunk = stream.push(id);
    EXPECT_TRUE(is_complete_utf8(chunk)) << "chunk after token " << id << ": " << to_hex(chunk);
    if (chunk.size() < tok.token_to_piece(id, false).size()) ++held_back;
    joined += chunk;
  }
  joined += stream.flush();
  EXPECT_EQ(joined, expected);
  EXPECT_GT(held_back, 0) << "the text should split some character over tokens";
}

TEST(StreamDecoder, SentencePieceByteTokens) {
  const Tokenizer* tok = tokenizer_for(shared_models() / "stories260K.gguf");
  if (!tok) GTEST_SKIP() << "shared models not found at " << shared_models();
  const auto ids = tok->encode(kMultiByteText, true, false);
  ASSERT_GT(ids.size(), kMultiByteText.size() / 2) << "stories260K spells non-ASCII text in byte tokens";
  expect_stream_matches_decode(*tok, ids, tok->decode(ids));
  EXPECT_EQ(tok->decode(ids), " " + kMultiByteText);  // BOS first: the space prefix stays
}

TEST(StreamDecoder, ByteLevelBpe) {
  const Tokenizer* tok = tokenizer_for(shared_models() / "vocab/ggml-vocab-gpt-2.gguf");
  if (!tok) GTEST_SKIP() << "shared models not found at " << shared_models();
  const auto ids = tok->encode(kMultiByteText, false, false);
  expect_stream_matches_decode(*tok, ids, kMultiByteText);
}

TEST(StreamDecoder, IncompleteTailAndInvalidBytesBecomeReplacementCharacters) {
  const Tokenizer* tok = tokenizer_for(shared_models() / "stories260K.gguf");
  if (!tok) GTEST_SKIP() << "shared models not found at " << shared_models();
  const auto ids = tok->encode("語", false, false);  // "▁", then three byte tokens
  ASSERT_EQ(ids.size(), 4u);
  StreamDecoder stream(*tok);
  EXPECT_EQ(stream.push(ids[0]), "");  // the leading space of the first token is dropped
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.flush(), "");

  const TokenId byte_ff = ids[1] - 0xE8 + 0xFF;  // byte tokens are in order: <0x00> = 3
  ASSERT_EQ(tok->token_text(byte_ff), "<0xFF>");
  StreamDecoder fresh(*tok);
  const auto a = tok->encode("a", false, false);
  EXPECT_EQ(fresh.push(byte_ff), "\xEF\xBF\xBD");
  EXPECT_EQ(fresh.push(a.back()), tok->token_to_piece(a.back(), false));
}

TEST(StreamDecoder, ContinuationKeepsLeadingSpace) {
  const Tokenizer* tok = tokenizer_for(shared_models() / "stories260K.gguf");
  if (!tok) GTEST_SKIP() << "shared models not found at " << shared_models();
  const auto ids = tok->encode("Once upon", false, false);
  StreamDecoder from_start(*tok), continuing(*tok, false);
  EXPECT_EQ(from_start.push(ids[0])[0], 'O');
  EXPECT_EQ(continuing.push(ids[0])[0], ' ');
}

TEST(Utf8, CompletePrefix) {
  bool incomplete = false;
  EXPECT_EQ(text::complete_utf8_prefix("ab\xE6\x97", incomplete), 2u);
  EXPECT_TRUE(incomplete);
  EXPECT_EQ(text::complete_utf8_prefix("ab\xE6\x97\xA5", incomplete), 5u);
  EXPECT_FALSE(incomplete);
  EXPECT_EQ(text::complete_utf8_prefix("a\x80" "b", incomplete), 1u);
  EXPECT_FALSE(incomplete);
  EXPECT_EQ(text::complete_utf8_prefix("\xED\xA0\x80", incomplete), 0u);  // surrogate
  EXPECT_FALSE(incomplete);
  EXPECT_EQ(text::decode_utf8_lenient("a\xFF\xC3\xA9"), (std::vector<uint32_t>{'a', 0xFFFD, 0xE9}));
}

// A special token's text is left out unless the decoder is to show it
// (serve's tool-call markers); other special tokens stay out either way.
TEST(StreamDecoder, ShowsTheSpecialTokensAskedFor) {
  const Tokenizer* tok = tokenizer_for(shared_models() / "vocab/ggml-vocab-llama-spm.gguf");
  if (!tok) GTEST_SKIP() << "shared models not found at " << shared_models();
  const auto bos = tok->encode("<s>", false, true), eos = tok->encode("</s>", false, true);
  ASSERT_EQ(bos.size(), 1u);
  ASSERT_EQ(eos.size(), 1u);
  ASSERT_EQ(tok->token_to_piece(eos[0], false), "") << "</s> is a control token in Llama 2's vocabulary";
  const auto hi = tok->encode(" hi", false, false);
  std::vector<TokenId> ids = bos;
  ids.insert(ids.end(), hi.begin(), hi.end());
  ids.push_back(eos[0]);
  auto decoded = [&](std::vector<TokenId> shown) {
    StreamDecoder d(*tok, false, std::move(shown));
    std::string text;
    for (const TokenId id : ids) text += d.push(id);
    return text + d.flush();
  };
  const std::string plain = decoded({});
  EXPECT_EQ(plain.find("</s>"), std::string::npos) << plain;
  EXPECT_EQ(decoded({eos[0]}), plain + "</s>");
}

TEST(Encode, InvalidUtf8NeverThrows) {
  using namespace std::string_literals;
  const std::string junk = "ok \xFF\xFE\xC3 \xE6\x97 \xF4\x90\x80\x80 \xED\xA0\x80 end\0x"s;
  for (const char* model : {"stories260K.gguf", "vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-deepseek-llm.gguf",
                            "synthetic/tiny-random-qwen2.gguf", "tiny-random-llama-bpe.gguf"}) {
    const Tokenizer* tok = tokenizer_for(shared_models() / model);
    if (!tok) GTEST_SKIP() << "shared models not found at " << shared_models();
    for (bool parse_special : {false, true}) {
      const auto ids = tok->encode(junk, false, parse_special);
      EXPECT_FALSE(ids.empty()) << model;
      const std::string text = tok->decode(ids);
      EXPECT_NE(text.find("end"), std::string::npos) << model;
    }
  }
}

}  // namespace
}  // namespace shardlm::test
