// The OpenAI-compatible HTTP front of a Scheduler (cpp-httplib): /v1/models (and /v1/models/ID),
// /v1/chat/completions, /v1/completions, /apply-template, /tokenize, /detokenize, /health, /metrics.
// Handlers parse and tokenize on the connection's thread and wait on their
// RequestStream; only the scheduler's thread touches the engine.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "serve/api_request.h"
#include "serve/metrics.h"
#include "serve/openai_format.h"
#include "serve/tool_calls.h"
#include "serve/scheduler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace shardlm::chat { class ModelTemplate; }

namespace shardlm::serve {

struct ServerOptions {
  const chat::ModelTemplate* chat_template = nullptr;  // null: ChatML
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port
  std::string model_id;            // what /v1/models lists and requests may name
  std::set<std::string> api_keys;  // empty: no authentication
  size_t max_body_bytes = 8 << 20;
  std::set<std::string> cors_origins;  // origins answered with CORS headers; "*": any; empty: none
  // A thinking template's reasoning goes to reasoning_content unless a
  // request's reasoning_format says otherwise (--reasoning-format auto|none).
  bool separate_reasoning = true;
  int connection_threads = 32;
};

class HttpServer {
 public:
  HttpServer(Scheduler& scheduler, const Tokenizer& tok, Metrics& metrics, int64_t n_ctx, ServerOptions options);
  ~HttpServer();
  // Binds the socket; returns the port (the chosen one when options.port is 0). Throws Error.
  int bind();
  // Serves until stop() (from another thread or a signal handler's thread).
  void listen();
  void stop();

 private:
  void routes();
  void generate(const httplib::Request& req, const std::string& body, httplib::Response& res, ApiKind kind);
  // Answers of the small routes; each throws RequestError.
  void apply_template(const std::string& body, httplib::Response& res) const;
  void tokenize(const std::string& body, httplib::Response& res) const;
  void detokenize(const std::string& body, httplib::Response& res) const;
  static nlohmann::ordered_json parse_body(const std::string& body);
  // The chat prompt of a request (chat_prompt.h; enable_thinking is true
  // for a thinking template unless the request sets it). Throws RequestError.
  std::string render(const ApiRequest& a) const;
  // Throws RequestError. A chat prompt's rendered text goes to `rendered`.
  std::vector<TokenId> prompt_tokens(const ApiRequest& a, ApiKind kind, std::string& rendered) const;
  Scheduler& scheduler_;
  const Tokenizer& tok_;
  Metrics& metrics_;
  int64_t n_ctx_;
  ServerOptions opt_;
  std::unique_ptr<httplib::Server> server_;
  size_t max_prompt_bytes_ = 0;  // see prompt_bytes_limit()
  ToolCallSyntax tool_syntax_ = ToolCallSyntax::None;  // the chat template's way of calling tools
  std::vector<TokenId> tool_marker_tokens_;  // the special tokens among the calls' markers
  bool template_thinks_ = false;  // the chat template writes <think> blocks (serve/reasoning.h)
  int listen_fd_ = -1;  // the listening socket, once bound
};

}  // namespace shardlm::serve
