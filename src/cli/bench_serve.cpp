// shardlm bench serve: a load generator for an OpenAI-compatible server
// (shardlm serve, llama-server). N clients each send streamed
// /v1/completions requests back to back until R requests are done; prints
// aggregate generated tok/s, time to first token and inter-token latency
// percentiles. TTFT runs from sending the request to the first chunk with
// text; ITL between chunks with text (a chunk may carry several tokens).
#include <httplib.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "cli/usage.h"
#include "core/clock.h"
#include "core/error.h"

namespace shardlm::cli {
namespace {

using Clock = SteadyClock;
double ms_between(Clock::time_point a, Clock::time_point b) { return seconds_of(b - a) * 1e3; }

struct ServeBenchOptions {
  std::string url, api_key = "none", label;
  int clients = 1, prompt_words = 32, gen = 16, requests = 0;
};

struct RequestTimes {
  double ttft_ms = NAN;
  std::vector<double> itl_ms;
  int64_t tokens = 0;
};

// Words cycled so that every request's prompt differs (no prefix reuse between them).
std::string prompt_text(int words, int request) {
  static const char* kWords[] = {"the", "little", "dog", "ran", "to", "a", "big", "park", "and", "saw", "one", "red", "ball"};
  std::string p;
  for (int k = 0; k < words; ++k) {
    if (k) p += ' ';
    p += kWords[size_t(k * 7 + request * 3) % std::size(kWords)];
  }
  return p;
}

RequestTimes one_request(httplib::Client& client, const ServeBenchOptions& o, int index) {
  const nlohmann::json body = {{"prompt", prompt_text(o.prompt_words, index)},
                               {"max_tokens", o.gen},
                               {"temperature", 0},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}}};
  RequestTimes t;
  std::vector<Clock::time_point> text_at;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Authorization", "Bearer " + o.api_key}};
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    for (size_t at; (at = buf.find("\n\n")) != std::string::npos; buf.erase(0, at + 2)) {
      const std::string line = buf.substr(0, at);
      if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
      const auto j = nlohmann::json::parse(line.substr(6), nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) throw Error(fmt::format("bench serve: the server sent an error: {}", j["error"].dump()));
      if (j.contains("usage") && j["usage"].is_object()) t.tokens = j["usage"].value("completion_tokens", int64_t(0));
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
          !j["choices"][0].value("text", "").empty())
        text_at.push_back(Clock::now());
    }
    return true;
  };
  const auto t0 = Clock::now();
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!client.send(req, res, err))
    throw Error(fmt::format("bench serve: {}: the request failed ({} error)", o.url, httplib::to_string(err)));
  if (res.status != 200) throw Error(fmt::format("bench serve: {}: HTTP {}", o.url, res.status));
  if (!text_at.empty()) t.ttft_ms = ms_between(t0, text_at[0]);
  for (size_t k = 1; k < text_at.size(); ++k) t.itl_ms.push_back(ms_between(text_at[k - 1], text_at[k]));
  if (t.tokens == 0) t.tokens = int64_t(text_at.size());
  return t;
}

double percentile(std::vector<double> xs, double p) {
  std::erase_if(xs, [](double x) { return std::isnan(x); });
  if (xs.empty()) return NAN;
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, size_t(p / 100 * double(xs.size())))];
}

void bench_serve(const ServeBenchOptions& o) {
  if (o.url.rfind("http://", 0) != 0 && o.url.rfind("https://", 0) != 0)
    throw UsageError(fmt::format("--url: '{}' is not http://host:port", o.url));
  const int total = o.requests > 0 ? o.requests : 2 * o.clients;
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<RequestTimes> results;
  std::string failure;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c)
    threads.emplace_back([&] {
      httplib::Client client(o.url);
      client.set_read_timeout(600, 0);
      try {
        for (int i; (i = next++) < total;) {
          auto t = one_request(client, o, i);
          std::lock_guard lock(mu);
          results.push_back(std::move(t));
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        if (failure.empty()) failure = e.what();
        next = total;
      }
    });
  for (auto& t : threads) t.join();
  if (!failure.empty()) throw Error(failure);
  const double seconds = ms_between(t0, Clock::now()) / 1e3;
  int64_t tokens = 0;
  std::vector<double> ttft, itl;
  for (const auto& r : results) {
    tokens += r.tokens;
    ttft.push_back(r.ttft_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
  }
  const nlohmann::ordered_json out = {{"label", o.label.empty() ? o.url : o.label},
                              {"clients", o.clients},
                              {"prompt_words", o.prompt_words},
                              {"gen", o.gen},
                              {"requests", total},
                              {"tok_per_s", std::round(double(tokens) / seconds * 100) / 100},
                              {"ttft_p50_ms", std::round(percentile(ttft, 50) * 10) / 10},
                              {"ttft_p99_ms", std::round(percentile(ttft, 99) * 10) / 10},
                              {"itl_p50_ms", std::round(percentile(itl, 50) * 10) / 10},
                              {"itl_p99_ms", std::round(percentile(itl, 99) * 10) / 10}};
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

void add_bench_serve(CLI::App& bench) {
  auto o = std::make_shared<ServeBenchOptions>();
  auto* cmd = bench.add_subcommand("serve", "load an OpenAI-compatible server: aggregate tok/s, TTFT and ITL percentiles");
  cmd->add_option("--url", o->url, "server, http://host:port")->required();
  cmd->add_option("--clients", o->clients, "concurrent clients")->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_option("--prompt", o->prompt_words, "prompt words per request")->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--gen", o->gen, "tokens to generate per request")->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--requests", o->requests, "requests in all (default: 2 per client)")->check(integer_in(1, 1 << 24));
  cmd->add_option("--api-key", o->api_key, "sent as Authorization: Bearer KEY");
  cmd->add_option("--label", o->label, "label of the result line (default: the URL)");
  cmd->callback([o] { bench_serve(*o); });
}

}  // namespace shardlm::cli
