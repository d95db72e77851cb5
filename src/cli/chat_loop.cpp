#include "cli/chat_loop.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "chat/model_template.h"
#include "cli/chat_template_file.h"
#include "cli/run_cluster.h"
#include "cli/scheduled_run.h"
#include "cli/usage.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/text.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "serve/chat_prompt.h"
#include "serve/local_engine.h"
#include "serve/stop_text.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::cli {
namespace {

// One conversation in the engine's slot 0; `cached` is what its KV cache holds.
class Chat {
 public:
  Chat(serve::Engine& engine, const Tokenizer& tokenizer, const ChatRequest& r)
      : engine_(engine), tokenizer_(tokenizer), r_(r) {}

  // Computes the tokens of `prompt` the cache lacks, then generates and prints
  // the reply. Returns its text (without a matched stop string).
  std::string reply(const std::vector<TokenId>& prompt) {
    size_t keep = 0;
    while (keep < cached_.size() && keep + 1 < prompt.size() && cached_[keep] == prompt[keep]) ++keep;
    spdlog::debug("chat: {} prompt tokens, {} of them already in the cache", prompt.size(), keep);
    if (live_) engine_.free(0);
    engine_.add(0, r_.sampling, std::span(prompt.data(), keep));
    live_ = true;
    cached_.assign(prompt.begin(), prompt.begin() + std::ptrdiff_t(keep));
    TokenId next = -1;
    const size_t chunk = size_t(std::max<int64_t>(1, engine_.max_step_entries()));
    for (size_t at = keep; at < prompt.size(); at += chunk) {
      std::vector<serve::StepEntry> entries;
      for (size_t i = at; i < std::min(prompt.size(), at + chunk); ++i)
        entries.push_back({0, int32_t(i), prompt[i], i + 1 == prompt.size()});
      const auto sampled = engine_.step(entries);
      if (!sampled.empty()) next = sampled.back().token;
      cached_.insert(cached_.end(), prompt.begin() + std::ptrdiff_t(at),
                     prompt.begin() + std::ptrdiff_t(at + entries.size()));
    }
    serve::StopText stops(tokenizer_, r_.stops);
    bool stopped = false;
    std::string text;
    const auto show = [&](const std::string& piece) {
      print_now(piece);
      text += piece;
    };
    const int64_t limit = r_.n_predict < 0 ? engine_.n_ctx() : r_.n_predict;
    for (int64_t n = 0; n < limit && !tokenizer_.is_end_of_generation(next);) {
      const serve::StopText::Out out = stops.push(next);
      show(out.text);
      stopped = out.stopped;
      if (stopped || ++n == limit) break;
      if (int64_t(cached_.size()) >= engine_.n_ctx()) {
        note_context_full(engine_.n_ctx());
        break;
      }
      const serve::StepEntry e{0, int32_t(cached_.size()), next, true};
      next = engine_.step(std::span(&e, 1)).front().token;
      cached_.push_back(e.token);
    }
    if (!stopped) show(stops.finish().text);
    print_now("\n");
    return text;
  }

 private:
  serve::Engine& engine_;
  const Tokenizer& tokenizer_;
  const ChatRequest& r_;
  std::vector<TokenId> cached_;
  bool live_ = false;
};

}  // namespace

void run_chat(const ChatRequest& r, std::istream& in) {
  auto file = gguf::File::open(r.model);
  auto tokenizer = Tokenizer::from_gguf(*file);
  const std::optional<chat::ModelTemplate> tmpl = load_chat_template(*file, r.template_file);
  const int threads = r.threads > 0 ? r.threads : usable_cpus();
  auto pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  ModelOptions mo;
  mo.n_ctx = r.ctx;
  mo.n_batch = r.batch;
  mo.n_seq = 1;
  mo.kv_type = kv_type_of(r.kv_type);
  mo.time_kernels_at_load = true;  // not while the first reply is awaited
  mo.pool = pool.get();
  serve::LocalEngine engine(*file, mo);
  Chat chat(engine, *tokenizer, r);

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!r.system.empty()) messages.push_back({{"role", "system"}, {"content", r.system}});
  const bool terminal = ::isatty(STDIN_FILENO);
  if (terminal) std::fprintf(stderr, "chat: one message per line; /exit or end of input (Ctrl-D) ends it\n");
  for (std::string line;;) {
    if (terminal) std::fputs("> ", stderr);
    if (!std::getline(in, line)) break;
    if (line.ends_with('\r')) line.pop_back();  // a line ended CRLF (input from Windows)
    // A line of blanks is no message, and "/exit " still ends the chat.
    const std::string_view said = strip_blanks(line);
    if (said.empty()) continue;
    if (said == "/exit") break;
    messages.push_back({{"role", "user"}, {"content", line}});
    const std::string rendered = serve::render_chat_prompt(messages, /*add_generation_prompt=*/true, nullptr,
                                                           tmpl ? &*tmpl : nullptr);
    const auto prompt = serve::tokenize_chat_prompt(*tokenizer, rendered, messages);
    if (int64_t(prompt.size()) >= r.ctx) {
      std::fprintf(stderr, "note: the conversation has %zu tokens, more than --ctx %lld allows; the chat ends\n",
                   prompt.size(), static_cast<long long>(r.ctx));
      break;
    }
    messages.push_back({{"role", "assistant"}, {"content", chat.reply(prompt)}});
  }
}

}  // namespace shardlm::cli
