#include "serve/api_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <random>

#include "serve/request_error.h"

namespace shardlm::serve {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void wrong(const std::string& field, const std::string& what) {
  throw RequestError(400, fmt::format("'{}' {}", field, what), field);
}

// A field that is absent or null gives nullopt.
const Json* field(const Json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const Json& body, const char* name, double lo, double hi) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong(name, "must be a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) wrong(name, fmt::format("must be in [{}, {}]", lo, hi));
  return x;
}

std::optional<int64_t> integer(const Json& body, const char* name, int64_t lo, int64_t hi) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) wrong(name, "must be an integer");
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) wrong(name, fmt::format("must be in [{}, {}]", lo, hi));
  return x;
}

std::optional<bool> boolean(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong(name, "must be a boolean");
  return v->get<bool>();
}

// Fields whose meaning shardlm cannot honour are refused rather than
// ignored: an answer that silently is not JSON, or ignores a bias, is worse
// than a 400 saying so. Their neutral values pass.
void refuse_what_cannot_be_honoured(const Json& body) {
  if (const Json* f = field(body, "response_format"); f && !(f->is_object() && f->value("type", "") == "text"))
    wrong("response_format", "only {\"type\": \"text\"} is supported: decoding is not constrained to JSON");
  if (const Json* f = field(body, "tool_choice"); f && !(f->is_string() && (*f == "auto" || *f == "none")))
    wrong("tool_choice", "only \"auto\" and \"none\" are supported: a tool call cannot be forced");
  if (const Json* f = field(body, "echo"); f && *f != false) wrong("echo", "is not supported");
  if (const Json* f = field(body, "best_of"); f && *f != 1) wrong("best_of", "must be 1");
  if (const Json* f = field(body, "suffix"); f && *f != "") wrong("suffix", "is not supported");
  // llama-server's other samplers, at anything but their "off" values.
  if (const Json* f = field(body, "typical_p"); f && *f != 1 && *f != 1.0) wrong("typical_p", "is not supported (1: off)");
  for (const char* name : {"mirostat", "dry_multiplier", "xtc_probability"})
    if (const Json* f = field(body, name); f && *f != 0 && *f != 0.0) wrong(name, "is not supported (0: off)");
}

void parse_common(const Json& body, ApiRequest& r) {
  if (!body.is_object()) throw RequestError(400, "the request body must be a JSON object");
  refuse_what_cannot_be_honoured(body);
  if (const Json* m = field(body, "model")) {
    if (!m->is_string()) wrong("model", "must be a string");
    r.model = m->get<std::string>();
  }
  r.stream = boolean(body, "stream").value_or(false);
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) wrong("stream_options", "must be an object");
    if (const Json* u = field(*so, "include_usage")) {
      if (!u->is_boolean()) wrong("stream_options.include_usage", "must be a boolean");
      r.include_usage = u->get<bool>();
    }
  }
  r.n = int(integer(body, "n", 1, kMaxChoices).value_or(1));

  SamplerParams& s = r.sampling;
  s.temperature = float(number(body, "temperature", 0, 2).value_or(1.0));
  s.top_p = float(number(body, "top_p", 0, 1).value_or(1.0));
  s.top_k = int32_t(integer(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0));
  s.min_p = float(number(body, "min_p", 0, 1).value_or(0.0));
  s.presence_penalty = float(number(body, "presence_penalty", -2, 2).value_or(0.0));
  s.frequency_penalty = float(number(body, "frequency_penalty", -2, 2).value_or(0.0));
  // llama-server's names: repeat_last_n -1 is the whole context (the server caps it there).
  s.repeat_penalty = float(number(body, "repeat_penalty", 0, 10).value_or(1.0));
  if (s.repeat_penalty == 0) wrong("repeat_penalty", "must be more than 0 (1: off)");
  if (const auto n = integer(body, "repeat_last_n", -1, std::numeric_limits<int32_t>::max()))
    s.penalty_window = *n < 0 ? std::numeric_limits<int32_t>::max() : int32_t(*n);
  if (const Json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) wrong("seed", "must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : uint64_t(seed->get<int64_t>());
  } else {
    s.seed = std::random_device{}();
  }

  // {"token id": bias in [-100, 100]}, as OpenAI takes it.
  if (const Json* bias = field(body, "logit_bias")) {
    if (!bias->is_object()) wrong("logit_bias", "must be an object of token ids and biases");
    if (bias->size() > kMaxLogitBias) wrong("logit_bias", fmt::format("has {} tokens, at most {}", bias->size(), kMaxLogitBias));
    for (const auto& [key, value] : bias->items()) {
      // Digits only: strtoll would take "+5", " 5" and "5\0x" as 5.
      const bool digits = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      const long long id = digits ? std::stoll(key) : -1;
      if (id < 0 || id > std::numeric_limits<TokenId>::max())
        wrong("logit_bias", fmt::format("key '{}' is not a token id", key));
      if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
        wrong("logit_bias", fmt::format("the bias of token {} must be a number in [-100, 100]", id));
      s.logit_bias.push_back({TokenId(id), float(value.get<double>())});
    }
    std::sort(s.logit_bias.begin(), s.logit_bias.end(), [](const TokenBias& a, const TokenBias& b) { return a.id < b.id; });
    for (size_t i = 1; i < s.logit_bias.size(); ++i)
      if (s.logit_bias[i].id == s.logit_bias[i - 1].id)
        wrong("logit_bias", fmt::format("token {} is given twice", s.logit_bias[i].id));
  }

  const int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  // At least 1, as OpenAI has it; absent: until the end of text or of the context.
  if (const auto m = integer(body, "max_completion_tokens", 1, kMaxTokens)) r.max_tokens = *m;
  else if (const auto m2 = integer(body, "max_tokens", 1, kMaxTokens)) r.max_tokens = *m2;

  if (const Json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& s2 : *stop) {
        if (!s2.is_string()) wrong("stop", "must be a string or an array of strings");
        r.stop.push_back(s2.get<std::string>());
      }
    } else {
      wrong("stop", "must be a string or an array of strings");
    }
  }
}

}  // namespace

ApiRequest parse_chat_request(const Json& body) {
  ApiRequest r;
  parse_common(body, r);
  // OpenAI's chat form: logprobs: true, then top_logprobs: N alternatives.
  const auto top = integer(body, "top_logprobs", 0, kMaxTopLogprobs);
  if (boolean(body, "logprobs").value_or(false)) r.sampling.logprobs = int32_t(top.value_or(0));
  else if (top) wrong("top_logprobs", "needs 'logprobs': true");
  const Json* messages = field(body, "messages");
  if (!messages) throw RequestError(400, "'messages' is required", "messages");
  if (!messages->is_array()) wrong("messages", "must be an array");
  r.messages = *messages;
  r.add_generation_prompt = boolean(body, "add_generation_prompt").value_or(true);
  if (const Json* tools = field(body, "tools")) {
    if (!tools->is_array()) wrong("tools", "must be an array");
    r.tools = *tools;
  }
  if (const Json* choice = field(body, "tool_choice")) r.tool_choice_none = *choice == "none";
  if (const Json* f = field(body, "reasoning_format")) {
    if (*f == "none") r.separate_reasoning = false;
    else if (*f == "auto" || *f == "deepseek") r.separate_reasoning = true;
    else wrong("reasoning_format", "must be \"none\", \"auto\" or \"deepseek\"");
  }
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) wrong("chat_template_kwargs", "must be an object");
    r.template_kwargs = *kw;
  }
  return r;
}

ApiRequest parse_completion_request(const Json& body) {
  ApiRequest r;
  parse_common(body, r);
  // The legacy form: logprobs: N alternatives besides the sampled token.
  if (const auto n = integer(body, "logprobs", 0, kMaxTopLogprobs)) r.sampling.logprobs = int32_t(*n);
  const Json* prompt = field(body, "prompt");
  if (!prompt) throw RequestError(400, "'prompt' is required", "prompt");
  // One prompt per request: a string, token ids, or either alone in a list.
  const Json& one = prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array())
                        ? (*prompt)[0]
                        : *prompt;
  if (one.is_string()) {
    r.prompt_text = one.get<std::string>();
  } else if (one.is_array() && !one.empty() && one[0].is_number()) {
    std::vector<TokenId> ids;
    for (const auto& t : one) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<TokenId>::max())
        wrong("prompt", "must be a string or an array of token ids");
      ids.push_back(TokenId(t.get<int64_t>()));
    }
    r.prompt_ids = std::move(ids);
  } else {
    wrong("prompt", "must be a string or an array of token ids (one prompt per request)");
  }
  return r;
}

TokenizeRequest parse_tokenize_request(const Json& body) {
  if (!body.is_object()) throw RequestError(400, "the request body must be a JSON object");
  TokenizeRequest r;
  const Json* content = field(body, "content");
  if (!content) throw RequestError(400, "'content' is required", "content");
  if (!content->is_string()) wrong("content", "must be a string");
  r.content = content->get<std::string>();
  r.add_special = boolean(body, "add_special").value_or(false);
  r.parse_special = boolean(body, "parse_special").value_or(true);
  r.with_pieces = boolean(body, "with_pieces").value_or(false);
  return r;
}

std::vector<TokenId> parse_detokenize_request(const Json& body) {
  if (!body.is_object()) throw RequestError(400, "the request body must be a JSON object");
  const Json* tokens = field(body, "tokens");
  if (!tokens) throw RequestError(400, "'tokens' is required", "tokens");
  if (!tokens->is_array()) wrong("tokens", "must be an array of token ids");
  std::vector<TokenId> ids;
  for (const auto& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<TokenId>::max())
      wrong("tokens", "must be an array of token ids");
    ids.push_back(TokenId(t.get<int64_t>()));
  }
  return ids;
}

}  // namespace shardlm::serve
