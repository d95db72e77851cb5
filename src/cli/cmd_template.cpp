// shardlm template: renders a chat request through a model's chat template
// (or a template file) and prints the prompt the model would read; for
// checking a template as POST /apply-template does.
#include <cstdio>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>

#include "chat/model_template.h"
#include "chat/request_context.h"
#include "cli/chat_template_file.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/json_nesting.h"
#include "gguf/gguf.h"
#include "serve/api_request.h"
#include "serve/chat_prompt.h"

namespace shardlm::cli {
namespace {

struct TemplateOptions {
  std::string model;
  std::string template_file;
  std::string request = "-";
};

std::string read_text(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open", path));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void run_template(const TemplateOptions& o) {
  nlohmann::ordered_json body;
  const std::string text = read_text(o.request);
  if (json_nests_deeper_than(text))
    throw Error(fmt::format("{}: arrays and objects nested more than {} deep", o.request, kMaxJsonNesting));
  try {
    body = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("{}: not JSON: {}", o.request, e.what()));
  }
  nlohmann::ordered_json context = chat::context_from_request(body);
  std::string prompt;
  if (!o.model.empty()) {
    // What serve renders: the model's template (or the file's), ChatML when it has none.
    auto file = gguf::File::open(o.model);
    if (const auto tmpl = load_chat_template(*file, o.template_file)) {
      prompt = tmpl->apply(context);
    } else {
      const serve::ApiRequest a = serve::parse_chat_request(body);
      prompt = serve::render_chat_prompt(a.messages, a.add_generation_prompt, a.template_kwargs, nullptr, a.tools);
    }
  } else {
    if (o.template_file.empty()) throw Error("template: give -m MODEL.gguf or --template-file FILE");
    const std::string source = read_text(o.template_file);
    context.emplace("bos_token", "");
    context.emplace("eos_token", "");
    prompt = chat::Template(source).render(context);
  }
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
}

}  // namespace

void add_template(CLI::App& app) {
  auto o = std::make_shared<TemplateOptions>();
  auto* cmd = app.add_subcommand("template", "Render a chat request (JSON: messages, tools, chat_template_kwargs) "
                                             "through a chat template and print the prompt");
  cmd->add_option("-m,--model", o->model, "GGUF whose tokenizer.chat_template and bos/eos tokens to use");
  cmd->add_option("--template-file", o->template_file, "Jinja template to use instead of the model's");
  cmd->add_option("request", o->request, "chat request JSON file, '-' for stdin")->capture_default_str();
  cmd->callback([o] { run_template(*o); });
}

}  // namespace shardlm::cli
