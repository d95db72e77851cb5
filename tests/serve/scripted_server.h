// An HttpServer over a scripted engine whose model "replies" with the
// tokens of a fixed text, whatever the prompt: the API's answers to a reply,
// whole and streamed, without a model that would write it.
#pragma once

#include <httplib.h>

#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chat/model_template.h"
#include "gguf/gguf.h"
#include "serve/http_server.h"
#include "serve/scheduler.h"
#include "test_paths.h"
#include "tokenizer/vocab.h"

namespace shardlm::serve {

// Room for the long system prompts of real templates (Mistral's) in the test vocabulary's tokens.
constexpr int64_t kScriptedContext = 8192;

// Replies with the tokens of `reply` then end of text, whatever the prompt.
class ScriptedEngine final : public Engine {
 public:
  ScriptedEngine(std::vector<TokenId> reply, int64_t n_vocab) : reply_(std::move(reply)), n_vocab_(n_vocab) {}
  int n_slots() const override { return 1; }
  int64_t n_ctx() const override { return kScriptedContext; }
  int64_t max_step_entries() const override { return 512; }
  int64_t n_vocab() const override { return n_vocab_; }
  void add(SlotId, const SamplerParams&, std::span<const TokenId>) override { next_ = 0; }
  void free(SlotId) override {}
  std::vector<SampledToken> step(std::span<const StepEntry> entries) override {
    std::vector<SampledToken> out;
    for (const auto& e : entries)
      if (e.sample) out.push_back({e.slot, reply_[std::min(next_++, reply_.size() - 1)], std::nullopt});
    return out;
  }

 private:
  std::vector<TokenId> reply_;
  int64_t n_vocab_;
  size_t next_ = 0;
};

struct ScriptedServer {
  std::unique_ptr<gguf::File> file = gguf::File::open(test_paths::kStoriesModel);
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*file);
  tok::Vocabulary vocab = tok::Vocabulary::load(*file);
  chat::ModelTemplate tmpl;
  std::unique_ptr<ScriptedEngine> engine;
  Metrics metrics;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<HttpServer> http;
  std::thread listener;
  int port = 0;

  // `reply`, then end of text; `template_source` renders the prompt.
  ScriptedServer(const std::string& reply, const std::string& template_source, bool separate_reasoning = true)
      : tmpl(*file, vocab, template_source) {
    auto ids = tok->encode(reply, false, false);
    ids.push_back(tok->eos());
    engine = std::make_unique<ScriptedEngine>(ids, tok->n_vocab());
    sched = std::make_unique<Scheduler>(*engine, *tok, SchedulerOptions{}, &metrics);
    ServerOptions o;
    o.chat_template = &tmpl;
    o.port = 0;
    o.model_id = "m";
    o.separate_reasoning = separate_reasoning;
    http = std::make_unique<HttpServer>(*sched, *tok, metrics, kScriptedContext, o);
    port = http->bind();
    sched->start();
    listener = std::thread([this] { http->listen(); });
  }
  ~ScriptedServer() {
    http->stop();
    listener.join();
  }
  httplib::Result post(const nlohmann::ordered_json& body, const char* path = "/v1/chat/completions") {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(20, 0);
    return c.Post(path, body.dump(), "application/json");
  }
};

// The chunks of a streamed answer's body ("data: {...}" lines).
inline std::vector<nlohmann::ordered_json> sse_chunks(const std::string& body) {
  std::vector<nlohmann::ordered_json> out;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("data: {")) out.push_back(nlohmann::ordered_json::parse(line.substr(6)));
  return out;
}

}  // namespace shardlm::serve
