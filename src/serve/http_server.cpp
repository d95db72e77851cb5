#include "serve/http_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "core/json_nesting.h"
#include "serve/api_request.h"
#include "serve/chat_prompt.h"
#include "serve/client_socket.h"
#include "serve/openai_format.h"
#include "serve/reasoning.h"
#include "serve/request_error.h"
#include "tokenizer/unicode_text.h"

namespace shardlm::serve {
namespace {

using Json = nlohmann::ordered_json;

constexpr auto kStreamPoll = std::chrono::milliseconds(100);
constexpr size_t kTokenizeBytes = size_t(1) << 20;  // /tokenize's least limit
// What the metrics count for a request whose client left before its answer (nginx's code).
constexpr int kClientClosedRequest = 499;

void send_json(httplib::Response& res, int status, const Json& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {},
                const std::string& code = {}) {
  send_json(res, status, error_json(message, status, param, code));
}

// OpenAI's answer to a model it does not have.
void send_model_not_found(httplib::Response& res, const std::string& asked, const std::string& served) {
  send_error(res, 404, fmt::format("model '{}' is not served here; this server serves '{}'", asked, served), "model",
             "model_not_found");
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::atomic<uint64_t> g_next_id{1};

// The body through the route's content reader, or nothing after an error
// response: httplib 0.11 holds a Content-Length body to the payload limit
// but read a chunked one whole (30 MB went to memory and the tokenizer).
// Past the limit a chunked body is read on and dropped, as httplib skips a
// Content-Length body over it, so the connection can carry the next request.
std::optional<std::string> read_body(const httplib::ContentReader& reader, httplib::Response& res, size_t max_bytes) {
  std::string body;
  bool too_large = false;
  const bool read = reader([&](const char* data, size_t n) {
    too_large = too_large || n > max_bytes - body.size();
    if (!too_large) body.append(data, n);
    return true;
  });
  if (read && !too_large) return body;
  if (too_large || res.status == 413)
    send_error(res, 413, fmt::format("the request body is larger than {} bytes (--max-body)", max_bytes));
  else
    send_error(res, 400, "the request body could not be read");
  return std::nullopt;
}

// One choice of a response (the request's `n`): its sequence, and what its
// stream keeps between the content provider's calls.
struct ChoiceState {
  std::shared_ptr<RequestStream> stream;
  int64_t text_offset = 0;  // completions' logprobs.text_offset of the next token
  std::string reply;        // the whole reply so far, when it is read for tool calls
  size_t streamed = 0;      // bytes of `reply` sent as content
  std::vector<LogprobEntry> held_logprobs;  // of the bytes held back
  std::optional<ReasoningSplitter> reasoning;  // a thinking model's reply, read for its reasoning
  bool done = false;
};

// A response's state, shared by its handler and its content provider.
struct StreamState {
  std::vector<ChoiceState> choices;
  ClientSocket client;
  ResponseHead head;
  bool include_usage = false;
  bool logprobs = false;  // the request asked for log-probabilities
  bool started = false;
  // A chat request with tools on a template that shows how to call them: the
  // reply is read for calls, and text that may begin one is held back.
  ToolCallSyntax tool_syntax = ToolCallSyntax::None;
  // A chat request to a thinking template: the reasoning goes apart; the
  // prompt may leave the reply inside a think block.
  bool reads_reasoning = false;
  bool starts_thinking = false;

  // The prompt counts once, as OpenAI counts it for n choices.
  Usage usage() const {
    Usage u = choices.front().stream->usage();
    for (size_t i = 1; i < choices.size(); ++i) u.completion_tokens += choices[i].stream->usage().completion_tokens;
    return u;
  }
  void cancel() {
    for (auto& c : choices) c.stream->cancel();  // a no-op for a sequence that ended
  }
};

Json chunk_logprobs(const StreamState& s, ChoiceState& c, const std::vector<LogprobEntry>& entries) {
  return s.logprobs ? logprobs_json(s.head.kind, entries, c.text_offset) : Json(nullptr);
}

// `j` (a response or chunk of one choice) as choice `index`.
Json as_choice(Json j, size_t index) {
  j["choices"][0]["index"] = index;
  return j;
}

bool write(httplib::DataSink& sink, const std::string& s) { return sink.write(s.data(), s.size()); }

// Takes the chunk's reasoning out of its text (and out of the reply, at its end).
std::string take_reasoning(ChoiceState& s, RequestStream::Chunk& c) {
  ReasonedReply r = s.reasoning->push(c.text);
  if (c.done) {
    ReasonedReply rest = s.reasoning->finish();
    r.reasoning += rest.reasoning;
    r.content += rest.content;
  }
  c.text = std::move(r.content);
  return std::move(r.reasoning);
}

// With tools: takes the chunk's text into the reply and leaves in `c` only
// what is surely content (the rest waits, logprobs too); at the end, the
// reply's calls when it made some (the caller sends them), else `c` carries
// all that waited.
std::optional<SplitReply> hold_tool_calls(ToolCallSyntax syntax, ChoiceState& s, RequestStream::Chunk& c) {
  s.reply += c.text;
  s.held_logprobs.insert(s.held_logprobs.end(), c.logprobs.begin(), c.logprobs.end());
  c.text.clear();
  c.logprobs.clear();
  if (c.done && c.finish != FinishReason::Error)
    if (SplitReply r = split_tool_calls(syntax, s.reply); !r.calls.empty()) return r;
  const size_t sure = c.done ? s.reply.size() : surely_content(syntax, s.reply);
  if (sure > s.streamed) {
    c.text = s.reply.substr(s.streamed, sure - s.streamed);
    c.logprobs = std::move(s.held_logprobs);
    s.held_logprobs.clear();
    s.streamed = sure;
  }
  return std::nullopt;
}

// A prompt text longer than this cannot fit in n_ctx tokens, and is refused
// before it is tokenized (an 8 MB prompt took ~270 MB to tokenize): no token
// covers more bytes than the longest piece of the vocabulary, and the margin
// of 4 covers whatever a tokenizer folds into one token (an unknown
// character, say).
size_t prompt_bytes_limit(const Tokenizer& tok, int64_t n_ctx) {
  size_t longest = 4;
  for (TokenId id = 0; id < tok.n_vocab(); ++id) longest = std::max(longest, tok.token_to_piece(id, true).size());
  return 4 * longest * size_t(std::max<int64_t>(n_ctx, 1));
}

// Why a request's body framing is refused before any of the body is read
// (RFC 9112 §6), or nothing. httplib 0.11 reads Content-Length with strtoull,
// which takes "-5" as 2^64 - 5, and then waited for that many bytes to skip;
// a length over the limit is refused at once rather than read and dropped.
std::optional<std::pair<int, std::string>> framing_problem(const httplib::Request& req, size_t max_bytes) {
  const auto lengths = req.headers.equal_range("Content-Length");
  const bool has_length = lengths.first != lengths.second;
  std::optional<std::string> length;
  for (auto it = lengths.first; it != lengths.second; ++it) {
    const std::string& v = it->second;
    if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::pair{400, fmt::format("Content-Length '{}' is not a byte count", v)};
    if (length && *length != v) return std::pair{400, std::string("the request has two different Content-Length headers")};
    length = v;
  }
  if (req.has_header("Transfer-Encoding")) {
    if (has_length) return std::pair{400, std::string("the request has both Content-Length and Transfer-Encoding")};
    if (req.get_header_value("Transfer-Encoding") != "chunked")
      return std::pair{501, fmt::format("Transfer-Encoding '{}' is not supported (only chunked)", req.get_header_value("Transfer-Encoding"))};
  }
  if (length && std::stoull(*length) > max_bytes)
    return std::pair{413, fmt::format("the request body is larger than {} bytes (--max-body)", max_bytes)};
  return std::nullopt;
}

// The method a route takes (what a 405 offers instead), null for no route.
const char* method_of_route(const std::string& path) {
  if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/apply-template" || path == "/tokenize" ||
      path == "/detokenize")
    return "POST";
  if (path == "/v1/models" || path.starts_with("/v1/models/") || path == "/health" || path == "/metrics") return "GET";
  return nullptr;
}

}  // namespace

HttpServer::HttpServer(Scheduler& scheduler, const Tokenizer& tok, Metrics& metrics, int64_t n_ctx, ServerOptions options)
    : scheduler_(scheduler), tok_(tok), metrics_(metrics), n_ctx_(n_ctx), opt_(std::move(options)),
      server_(std::make_unique<httplib::Server>()), max_prompt_bytes_(prompt_bytes_limit(tok, n_ctx)),
      tool_syntax_(opt_.chat_template ? tool_call_syntax(opt_.chat_template->source()) : ToolCallSyntax::None),
      template_thinks_(opt_.chat_template && template_thinks(opt_.chat_template->source())) {
  // A marker that is one special token would not be in the reply's text.
  for (const std::string_view marker : tool_call_markers(tool_syntax_)) {
    const std::vector<TokenId> ids = tok_.encode(marker, false, true);
    if (ids.size() == 1 && tok_.token_to_piece(ids[0], false) != marker) tool_marker_tokens_.push_back(ids[0]);
  }
  const int threads = opt_.connection_threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  server_->set_payload_max_length(opt_.max_body_bytes);
  // Not httplib's default options: they add SO_REUSEPORT, with which a
  // second server on the same port started without a word and took half of
  // the connections.
  server_->set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const int port = opt_.port == 0 ? server_->bind_to_any_port(opt_.host) : (server_->bind_to_port(opt_.host, opt_.port) ? opt_.port : -1);
  if (port <= 0) throw Error(fmt::format("serve: cannot listen on {}:{}", opt_.host, opt_.port));
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients
  // reconnecting at once overflowed it and the kernel dropped handshakes
  // (their requests failed about a second in); listen() again raises it.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  return port;
}

void HttpServer::listen() { server_->listen_after_bind(); }
void HttpServer::stop() { server_->stop(); }

void HttpServer::routes() {
  auto& s = *server_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (const auto problem = framing_problem(req, opt_.max_body_bytes)) {
      res.set_header("Connection", "close");  // the unread body must not be taken for the next request
      send_error(res, problem->first, problem->second);
      return httplib::Server::HandlerResponse::Handled;
    }
    // Browsers let a page of another origin read an answer only with these
    // headers, and ask first (OPTIONS, no credentials) before a POST with JSON.
    const std::string origin = req.get_header_value("Origin");
    const bool any_origin = opt_.cors_origins.count("*") > 0;
    if (!origin.empty() && (any_origin || opt_.cors_origins.count(origin))) {
      res.set_header("Access-Control-Allow-Origin", any_origin ? "*" : origin);
      if (!any_origin) res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS") {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "86400");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (opt_.api_keys.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) == 0 && opt_.api_keys.count(auth.substr(prefix.size()))) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401, auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "invalid API key");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors the library answers itself (404, 413, 400 for a broken request line) get an OpenAI error object too.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (const char* allowed = method_of_route(req.path); res.status == 404 && allowed) {
      res.set_header("Allow", allowed);
      send_error(res, 405, fmt::format("{} {}: this route takes {}", req.method, req.path, allowed));
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::string message = res.status == 404   ? fmt::format("no route for {} {}", req.method, req.path)
                                : res.status == 413 ? "the request body is too large"
                                                    : fmt::format("HTTP {}", res.status);
    send_error(res, res.status, message);
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    // Called once the response is written.
    if (res.get_header_value("Connection") == "close" && req.get_header_value("Connection") != "close")
      ClientSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port).shut_down();
    metrics_.count_request(res.status);
    spdlog::debug("serve: {} {} → {}", req.method, req.path, res.status);
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, what);
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const Gauges g = scheduler_.gauges();
    const std::string problem = scheduler_.health();
    Json body{{"status", problem.empty() ? "ok" : "degraded"}, {"slots_idle", g.kv_slots - g.kv_slots_used},
              {"slots_processing", g.kv_slots_used}};
    if (!problem.empty()) body["error"] = problem;
    if (auto nodes = scheduler_.nodes(); !nodes.empty()) body["nodes"] = std::move(nodes);
    send_json(res, problem.empty() ? 200 : 503, body);
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(scheduler_.gauges()), "text/plain; version=0.0.4");
  });
  const auto model_object = [this] {
    return Json{{"id", opt_.model_id}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "shardlm"},
                {"meta", {{"n_ctx", n_ctx_}}}};
  };
  s.Get("/v1/models", [model_object](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, Json{{"object", "list"}, {"data", Json::array({model_object()})}});
  });
  s.Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != opt_.model_id) return send_model_not_found(res, req.matches[1].str(), opt_.model_id);
    send_json(res, 200, model_object());
  });
  const auto generating = [this](ApiKind kind) {
    return [this, kind](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      if (const auto body = read_body(reader, res, opt_.max_body_bytes)) generate(req, *body, res, kind);
    };
  };
  s.Post("/v1/chat/completions", generating(ApiKind::Chat));
  s.Post("/v1/completions", generating(ApiKind::Completion));
  const auto answering = [this](void (HttpServer::*answer)(const std::string&, httplib::Response&) const) {
    return [this, answer](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& reader) {
      const auto body = read_body(reader, res, opt_.max_body_bytes);
      if (!body) return;
      try {
        (this->*answer)(*body, res);
      } catch (const RequestError& e) {
        send_error(res, e.status(), e.what(), e.param());
      }
    };
  };
  s.Post("/tokenize", answering(&HttpServer::tokenize));
  s.Post("/detokenize", answering(&HttpServer::detokenize));
  s.Post("/apply-template", answering(&HttpServer::apply_template));
}

void HttpServer::apply_template(const std::string& body, httplib::Response& res) const {
  send_json(res, 200, Json{{"prompt", render(parse_chat_request(parse_body(body)))}});
}

// llama-server's /tokenize and /detokenize, for clients that count or edit
// tokens: pieces as they are (special tokens' text, no space clean-up), a
// piece that is part of a character as its bytes.
void HttpServer::tokenize(const std::string& body, httplib::Response& res) const {
  const TokenizeRequest r = parse_tokenize_request(parse_body(body));
  // Tokenizing takes ~30 bytes of memory a byte of text: long documents, not --max-body's 8 MB each.
  const size_t limit = std::max(max_prompt_bytes_, kTokenizeBytes);
  if (r.content.size() > limit)
    throw RequestError(400, fmt::format("'content' has {} bytes; /tokenize takes at most {}", r.content.size(), limit), "content");
  const std::vector<TokenId> ids = tok_.encode(r.content, r.add_special, r.parse_special);
  Json tokens = Json::array();
  for (const TokenId id : ids) {
    if (!r.with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tok_.token_to_piece(id, true);
    bool incomplete = false;
    const bool whole = text::complete_utf8_prefix(piece, incomplete) == piece.size() && !incomplete;
    tokens.push_back(Json{{"id", id}, {"piece", whole ? Json(piece) : Json(std::vector<uint8_t>(piece.begin(), piece.end()))}});
  }
  send_json(res, 200, Json{{"tokens", std::move(tokens)}});
}

void HttpServer::detokenize(const std::string& body, httplib::Response& res) const {
  std::string content;
  for (const TokenId id : parse_detokenize_request(parse_body(body))) {
    if (id >= tok_.n_vocab())
      throw RequestError(400, fmt::format("'tokens': token id {} is outside the vocabulary of {}", id, tok_.n_vocab()), "tokens");
    content += tok_.token_to_piece(id, true);
  }
  send_json(res, 200, Json{{"content", content}});
}

nlohmann::ordered_json HttpServer::parse_body(const std::string& body) {
  if (json_nests_deeper_than(body))
    throw RequestError(400, fmt::format("the request body nests arrays and objects more than {} deep", kMaxJsonNesting));
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw RequestError(400, "the request body is not valid JSON");
  return j;
}

std::string HttpServer::render(const ApiRequest& a) const {
  if (!template_thinks_ || a.template_kwargs.contains("enable_thinking"))
    return render_chat_prompt(a.messages, a.add_generation_prompt, a.template_kwargs, opt_.chat_template, a.tools);
  // A thinking model thinks unless asked not to, as llama-server has it: some
  // templates (QwQ's, R1's Qwen distill's) close the block when the flag is unset.
  nlohmann::ordered_json kwargs = a.template_kwargs;
  kwargs["enable_thinking"] = true;
  return render_chat_prompt(a.messages, a.add_generation_prompt, kwargs, opt_.chat_template, a.tools);
}

std::vector<TokenId> HttpServer::prompt_tokens(const ApiRequest& a, ApiKind kind, std::string& rendered) const {
  std::vector<TokenId> tokens;
  const char* field = kind == ApiKind::Chat ? "messages" : "prompt";
  const auto check_length = [&](const std::string& text) {
    if (text.size() > max_prompt_bytes_)
      throw RequestError(400, fmt::format("'{}': the prompt has {} bytes, more than the context of {} tokens can hold", field, text.size(), n_ctx_), field);
  };
  if (kind == ApiKind::Chat) {
    rendered = render(a);
    check_length(rendered);
    tokens = tokenize_chat_prompt(tok_, rendered, a.messages);
  } else if (a.prompt_ids) {
    tokens = *a.prompt_ids;
    for (const TokenId t : tokens)
      if (t >= tok_.n_vocab()) throw RequestError(400, fmt::format("'{}': token id {} is outside the vocabulary of {}", field, t, tok_.n_vocab()), field);
  } else {
    check_length(a.prompt_text);
    tokens = tok_.encode(a.prompt_text, true, true);
  }
  if (tokens.empty()) throw RequestError(400, fmt::format("'{}': the prompt is empty", field), field);
  for (const TokenBias& b : a.sampling.logit_bias)
    if (b.id >= tok_.n_vocab())
      throw RequestError(400, fmt::format("'logit_bias': token id {} is outside the vocabulary of {}", b.id, tok_.n_vocab()), "logit_bias");
  if (int64_t(tokens.size()) >= n_ctx_)
    throw RequestError(400, fmt::format("'{}': the prompt has {} tokens; the context holds {} (prompt and completion)", field, tokens.size(), n_ctx_), field);
  return tokens;
}

void HttpServer::generate(const httplib::Request& req, const std::string& body, httplib::Response& res, ApiKind kind) {
  std::shared_ptr<StreamState> state = std::make_shared<StreamState>();
  ApiRequest a;
  std::string rendered;
  try {
    a = kind == ApiKind::Chat ? parse_chat_request(parse_body(body)) : parse_completion_request(parse_body(body));
    if (a.model && *a.model != opt_.model_id) return send_model_not_found(res, *a.model, opt_.model_id);
    a.sampling.penalty_window = int32_t(std::min<int64_t>(a.sampling.penalty_window, n_ctx_));
    const std::vector<TokenId> prompt = prompt_tokens(a, kind, rendered);
    if (kind == ApiKind::Chat && a.tools.is_array() && !a.tools.empty() && !a.tool_choice_none) state->tool_syntax = tool_syntax_;
    // n choices are n sequences of one prompt, each with its own seed.
    for (int i = 0; i < a.n; ++i) {
      SamplerParams p = a.sampling;
      p.seed += uint64_t(i);
      GenerationRequest g{prompt, p, a.max_tokens, a.stop, {}};
      if (state->tool_syntax != ToolCallSyntax::None) g.shown_special = tool_marker_tokens_;
      auto stream = scheduler_.submit(std::move(g));  // may throw QueueFull
      state->choices.emplace_back().stream = std::move(stream);
    }
  } catch (const RequestError& e) {
    state->cancel();
    return send_error(res, e.status(), e.what(), e.param());
  } catch (const QueueFull& e) {
    state->cancel();
    return send_error(res, 429, e.what());
  } catch (const Error& e) {
    state->cancel();
    return send_error(res, 400, e.what());
  }
  state->head = {kind, fmt::format("{}-{}", kind == ApiKind::Chat ? "chatcmpl" : "cmpl", g_next_id++), unix_now(), opt_.model_id};
  state->include_usage = a.include_usage;
  state->reads_reasoning = kind == ApiKind::Chat && template_thinks_ && a.separate_reasoning.value_or(opt_.separate_reasoning);
  state->starts_thinking = state->reads_reasoning && prompt_opens_thinking(rendered);
  if (state->reads_reasoning)
    for (auto& choice : state->choices) choice.reasoning.emplace(state->starts_thinking);
  state->logprobs = a.sampling.logprobs >= 0;
  state->client = ClientSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);

  if (!a.stream) {
    std::vector<RequestStream::Chunk> ends;
    for (auto& choice : state->choices) {
      std::optional<RequestStream::Chunk> done;
      while (!(done = choice.stream->wait_all(kStreamPoll)))
        if (state->client.gone()) {
          state->cancel();
          res.status = kClientClosedRequest;
          return;
        }
      if (done->finish == FinishReason::Error) {
        state->cancel();
        return send_error(res, scheduler_.health().empty() ? 500 : 503, done->error);
      }
      ends.push_back(std::move(*done));
    }
    const Usage usage = state->usage();
    Json response;
    for (size_t i = 0; i < ends.size(); ++i) {
      const RequestStream::Chunk& c = ends[i];
      const Json logprobs = chunk_logprobs(*state, state->choices[i], c.logprobs);
      const ReasonedReply reply = state->reads_reasoning ? split_reasoning(c.text, state->starts_thinking)
                                                         : ReasonedReply{{}, c.text};
      const SplitReply r = split_tool_calls(state->tool_syntax, reply.content);
      Json one = as_choice(r.calls.empty() ? response_json(state->head, reply.content, c.finish, usage, logprobs)
                                           : tool_call_response_json(state->head, r, usage, logprobs),
                           i);
      if (!reply.reasoning.empty()) one["choices"][0]["message"]["reasoning_content"] = reply.reasoning;
      if (i == 0) response = std::move(one);
      else response["choices"].push_back(std::move(one["choices"][0]));
    }
    return send_json(res, 200, response);
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state, this](size_t, httplib::DataSink& sink) {
        StreamState& s = *state;
        const auto send = [&](const Json& j) { return write(sink, sse(j)); };
        if (!s.started) {
          s.started = true;
          for (size_t i = 0; i < s.choices.size() && s.head.kind == ApiKind::Chat; ++i)
            if (!send(as_choice(chunk_json(s.head, "", FinishReason::None, true), i))) return false;
        }
        const size_t active = size_t(std::count_if(s.choices.begin(), s.choices.end(), [](const auto& c) { return !c.done; }));
        bool wrote = false;
        for (size_t i = 0; i < s.choices.size(); ++i) {
          ChoiceState& choice = s.choices[i];
          if (choice.done) continue;
          auto c = choice.stream->next(active == 1 ? kStreamPoll : kStreamPoll / 10);
          if (choice.reasoning) {
            const std::string reasoning = take_reasoning(choice, c);
            // Its tokens' logprobs go with it unless the chunk's content takes them.
            if (!reasoning.empty() &&
                !send(as_choice(reasoning_chunk_json(s.head, reasoning, c.text.empty() ? chunk_logprobs(s, choice, c.logprobs) : Json(nullptr)), i)))
              return false;
            if (!reasoning.empty() && c.text.empty()) c.logprobs.clear();
            wrote = wrote || !reasoning.empty();
          }
          std::optional<SplitReply> called;
          if (s.tool_syntax != ToolCallSyntax::None && (called = hold_tool_calls(s.tool_syntax, choice, c))) {
            const std::string rest = called->content.substr(std::min(choice.streamed, called->content.size()));
            if (!without_blank_ends(rest).empty() && !send(as_choice(chunk_json(s.head, rest, FinishReason::None), i)))
              return false;
            Json calls = as_choice(tool_call_chunk_json(s.head, called->calls), i);
            calls["choices"][0]["logprobs"] = chunk_logprobs(s, choice, choice.held_logprobs);
            if (!send(calls) || !send(as_choice(tool_call_finish_chunk_json(s.head), i))) return false;
            choice.done = wrote = true;
            continue;
          }
          if ((!c.text.empty() || !c.logprobs.empty()) &&
              !send(as_choice(chunk_json(s.head, c.text, FinishReason::None, false, chunk_logprobs(s, choice, c.logprobs)), i)))
            return false;
          wrote = wrote || !c.text.empty() || !c.logprobs.empty() || c.done;
          if (!c.done) continue;
          choice.done = true;
          if (c.finish == FinishReason::Error) {
            s.cancel();
            if (!send(error_json(c.error, scheduler_.health().empty() ? 500 : 503)) || !write(sink, "data: [DONE]\n\n"))
              return false;
            sink.done();
            return true;
          }
          if (!send(as_choice(chunk_json(s.head, "", c.finish), i))) return false;
        }
        // Nothing to write (queued, or reading the prompt): only a look tells whether the client is still there.
        if (!wrote && s.client.gone()) return false;
        if (std::any_of(s.choices.begin(), s.choices.end(), [](const auto& c) { return !c.done; })) return true;
        if (s.include_usage && !send(usage_chunk_json(s.head, s.usage()))) return false;
        if (!write(sink, "data: [DONE]\n\n")) return false;
        sink.done();
        return true;
      },
      [state](bool) { state->cancel(); });  // frees the slots when the client left
}

}  // namespace shardlm::serve
