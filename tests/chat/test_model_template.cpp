// ModelTemplate: the GGUF's template with the vocabulary's bos/eos strings.
#include <gtest/gtest.h>

#include "chat/model_template.h"
#include "chat_test_util.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"
#include "test_paths.h"

namespace shardlm::chat {
namespace {

const std::string kVocabFile = std::string(shardlm::test_paths::models_dir()) + "/vocab/ggml-vocab-llama-spm.gguf";

TEST(ChatModelTemplate, AddsTheVocabularyBosAndEosStrings) {
  auto file = gguf::File::open(kVocabFile);
  tok::Vocabulary vocab = tok::Vocabulary::load(*file);
  ModelTemplate t(*file, vocab, std::string("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"));
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.eos_token(), "</s>");
  nlohmann::ordered_json context = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  EXPECT_EQ(t.apply(context), "<s>hi</s>");
  context["bos_token"] = "";
  EXPECT_EQ(t.apply(context), "hi</s>");
}

TEST(ChatModelTemplate, AFileWithoutATemplateIsAClearError) {
  auto file = gguf::File::open(kVocabFile);
  tok::Vocabulary vocab = tok::Vocabulary::load(*file);
  try {
    ModelTemplate t(*file, vocab);
    FAIL() << "no error";
  } catch (const shardlm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.chat_template"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardlm::chat
