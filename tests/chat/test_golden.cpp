// Every bundled template × conversation rendered byte for byte as jinja2
// renders it under Hugging Face's conventions (tests/chat/data/golden*.json).
#include <gtest/gtest.h>

#include <map>

#include "chat_test_util.h"

namespace shardlm::chat {
namespace {

using testing::golden_options;
using testing::read_data_file;
using testing::read_data_json;

// Renders every case of a golden file whose conversations come from `conversations_file`.
void check_golden(const std::string& golden_file, const std::string& conversations_file) {
  nlohmann::ordered_json golden = read_data_json(golden_file);
  std::map<std::string, nlohmann::ordered_json> conversations;
  for (const auto& c : read_data_json(conversations_file)) conversations[c["id"].get<std::string>()] = c;
  std::map<std::string, Template> templates;
  int checked = 0;
  for (const auto& expected : golden["cases"]) {
    std::string name = expected["template"];
    std::string id = expected["conversation"];
    SCOPED_TRACE(name + " × " + id);
    auto it = templates.find(name);
    if (it == templates.end()) it = templates.emplace(name, Template(read_data_file(name + ".jinja"))).first;
    const auto& conversation = conversations.at(id);
    nlohmann::ordered_json context = {
        {"messages", conversation["messages"]},
        {"add_generation_prompt", conversation.value("add_generation_prompt", true)},
        {"bos_token", expected["bos_token"]},
        {"eos_token", expected["eos_token"]},
    };
    for (const char* key : {"tools", "enable_thinking"})
      if (conversation.contains(key)) context[key] = conversation[key];
    if (expected["error"].is_null()) {
      try {
        EXPECT_EQ(it->second.render(context, golden_options()), expected["rendered"].get<std::string>());
      } catch (const TemplateError& e) {
        ADD_FAILURE() << "threw: " << e.what();
      }
    } else {
      std::string error = expected["error"];
      const std::string raised = "TemplateError: ";
      if (error.rfind("SecurityError: ", 0) == 0) {
        // jinja2's immutable sandbox refuses list.append; we allow it (see data/README.md).
        EXPECT_NO_THROW(it->second.render(context, golden_options()));
      } else if (error.rfind(raised, 0) == 0) {
        try {
          it->second.render(context, golden_options());
          ADD_FAILURE() << "rendered, expected " << error;
        } catch (const RaisedError& e) {
          EXPECT_EQ(std::string(e.what()), error.substr(raised.size()));
        }
      } else {  // jinja2 failed on its own (TypeError, UndefinedError): so must we
        EXPECT_THROW(it->second.render(context, golden_options()), RenderError) << error;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(ChatGolden, SharedConversations) { check_golden("golden.json", "conversations.json"); }
TEST(ChatGolden, ExtraConversations) { check_golden("golden-extra.json", "conversations-extra.json"); }

}  // namespace
}  // namespace shardlm::chat
