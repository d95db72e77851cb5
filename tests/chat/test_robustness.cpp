// Broken templates and hostile contexts fail with a TemplateError, never a
// crash or another exception: every prefix of every bundled template is
// parsed, and rendered where it parses.
#include <gtest/gtest.h>

#include <filesystem>

#include "chat_test_util.h"
#include "test_paths.h"

namespace shardlm::chat {
namespace {

using json = nlohmann::ordered_json;

TEST(ChatRobustness, EveryPrefixOfARealTemplateParsesOrFailsCleanly) {
  json context = testing::read_data_json("conversations-extra.json")[0];
  context["bos_token"] = "<s>";
  context["eos_token"] = "</s>";
  int parsed = 0, refused = 0;
  for (const auto& entry : std::filesystem::directory_iterator(shardlm::test_paths::chat_data_dir())) {
    if (entry.path().extension() != ".jinja") continue;
    std::string source = testing::read_data_file(entry.path().filename().string());
    for (size_t cut = 0; cut <= source.size(); cut += 31) {
      SCOPED_TRACE(entry.path().filename().string() + " cut at " + std::to_string(cut));
      try {
        Template t(std::string_view(source).substr(0, cut));
        ++parsed;
        t.render(context, testing::golden_options());
      } catch (const TemplateError&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(parsed, 20);
  EXPECT_GT(refused, 100);
}

TEST(ChatRobustness, DeepNestingIsRefused) {
  EXPECT_THROW(Template("{{ " + std::string(5000, '(') + "1 }}"), ParseError);
  EXPECT_THROW(Template("{{ " + std::string(5000, '[') + " }}"), ParseError);
  EXPECT_THROW(Template("{{ " + std::string(5000, '-') + "1 }}"), ParseError);
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  EXPECT_THROW(Template{ifs}, ParseError);
  json deep = json::array();
  for (int i = 0; i < 300; ++i) deep = json::array({std::move(deep)});
  EXPECT_THROW(Template("{{ x | tojson }}").render({{"x", deep}}), RenderError);
}

TEST(ChatRobustness, LiteralsAtTheLimits) {
  EXPECT_EQ(Template("{{ 1e999 }} {{ -1e999 }}").render(json::object()), "inf -inf");
  EXPECT_THROW(Template("{{ 99999999999999999999 }}"), ParseError);
  EXPECT_THROW(Template("{{ 9223372036854775807 + 1 }}").render(json::object()), RenderError);
  EXPECT_THROW(Template("{{ 'x' * 100000000 }}").render(json::object()), RenderError);
  EXPECT_THROW(Template("{{ range(100000000) | length }}").render(json::object()), RenderError);
}

}  // namespace
}  // namespace shardlm::chat
