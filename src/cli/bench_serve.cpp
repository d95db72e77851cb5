// shardlm bench serve: a load generator for an OpenAI-compatible server
// (shardlm serve, llama-server). N clients each send streamed
// /v1/completions requests back to back until R requests are done; prints
// aggregate generated tok/s, time to first token and inter-token latency
// percentiles, and each stream's decode tok/s (first to last text). TTFT runs
// from sending the request to the first chunk with text; ITL between chunks
// with text (a chunk may carry several tokens). --duration makes it a soak
// (errors counted); --long-prompt measures the streams' ITL while one long
// prompt is read beside them (chunked prefill).
#include <httplib.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
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
  double duration = 0;  // > 0: clients send until then instead of `requests`
  int long_prompt = 0;  // > 0: one request with this many words, sent once every client streams
};

struct RequestTimes {
  Clock::time_point sent;
  std::vector<Clock::time_point> text_at;  // chunks with text
  int64_t tokens = 0, prompt_tokens = 0;
};

// Words cycled after the request's number, so that no two prompts share more
// than their first token (no prefix reuse between requests).
std::string prompt_text(int words, int request) {
  static const char* kWords[] = {"the", "little", "dog", "ran", "to", "a", "big", "park", "and", "saw", "one", "red", "ball"};
  std::string p = std::to_string(request);
  for (int k = 1; k < words; ++k) {
    p += ' ';
    p += kWords[size_t(k * 7 + request * 3) % std::size(kWords)];
  }
  return p;
}

// One streamed /v1/completions request; `first_texts` counts requests that got their first text.
RequestTimes one_request(httplib::Client& client, const ServeBenchOptions& o, const std::string& prompt, int max_tokens,
                         std::atomic<int>& first_texts) {
  const nlohmann::json body = {{"prompt", prompt},
                               {"max_tokens", max_tokens},
                               {"temperature", 0},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}}};
  RequestTimes t;
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
      if (j.contains("usage") && j["usage"].is_object()) {
        t.tokens = j["usage"].value("completion_tokens", int64_t(0));
        t.prompt_tokens = j["usage"].value("prompt_tokens", int64_t(0));
      }
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
          !j["choices"][0].value("text", "").empty()) {
        t.text_at.push_back(Clock::now());
        if (t.text_at.size() == 1) ++first_texts;
      }
    }
    return true;
  };
  t.sent = Clock::now();
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!client.send(req, res, err))
    throw Error(fmt::format("bench serve: {}: the request failed after {:.1f} s, {} chunks ({} error)", o.url,
                            ms_between(t.sent, Clock::now()) / 1e3, t.text_at.size(), httplib::to_string(err)));
  if (res.status != 200) throw Error(fmt::format("bench serve: {}: HTTP {}", o.url, res.status));
  if (t.tokens == 0) t.tokens = int64_t(t.text_at.size());
  return t;
}

double percentile(std::vector<double> xs, double p) {
  std::erase_if(xs, [](double x) { return std::isnan(x); });
  if (xs.empty()) return NAN;
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, size_t(p / 100 * double(xs.size())))];
}

double rounded(double x, double scale) { return std::isnan(x) ? x : std::round(x * scale) / scale; }

struct LoadResult {
  std::vector<RequestTimes> requests;
  int errors = 0;
  std::string first_error;
  double seconds = 0;
};

// The clients' requests: `total` of them, as many as fit in o.duration, or
// with --long-prompt until `stop`. A failed request is counted (a server may
// refuse some generated text) and the client goes on; only when none
// succeeded is it an error. `first_texts` counts requests that got their first text.
LoadResult run_clients(const ServeBenchOptions& o, int total, std::atomic<int>& first_texts, const std::atomic<bool>& stop) {
  std::atomic<int> next{0};
  std::mutex mu;
  LoadResult out;
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration));
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c)
    threads.emplace_back([&] {
      httplib::Client client(o.url);
      client.set_read_timeout(600, 0);
      for (;;) {
        const int i = next++;
        if (o.long_prompt > 0 ? stop.load() : o.duration > 0 ? Clock::now() >= until : i >= total) break;
        try {
          auto t = one_request(client, o, prompt_text(o.prompt_words, i), o.gen, first_texts);
          std::lock_guard lock(mu);
          out.requests.push_back(std::move(t));
        } catch (const std::exception& e) {
          std::lock_guard lock(mu);
          if (out.first_error.empty()) out.first_error = e.what();
          ++out.errors;
        }
      }
    });
  for (auto& t : threads) t.join();
  if (out.requests.empty() && out.errors > 0) throw Error(out.first_error);
  out.seconds = ms_between(t0, Clock::now()) / 1e3;
  return out;
}

// The load's aggregate tok/s, latency percentiles and, with a long prompt,
// the streams' inter-token latency while it was read against otherwise.
nlohmann::ordered_json summary(const ServeBenchOptions& o, const LoadResult& load,
                               const std::optional<RequestTimes>& long_request) {
  int64_t tokens = 0, decode_tokens = 0, prompt_tokens = 0;
  double decode_seconds = 0;
  std::vector<double> ttft, itl, itl_beside_long, itl_otherwise;
  // While the long prompt is read: from sending it to its first text.
  Clock::time_point long_from{}, long_to{};
  if (long_request && !long_request->text_at.empty()) {
    long_from = long_request->sent;
    long_to = long_request->text_at[0];
  }
  for (const auto& r : load.requests) {
    tokens += r.tokens;
    prompt_tokens += r.prompt_tokens;
    if (r.text_at.empty()) continue;
    ttft.push_back(ms_between(r.sent, r.text_at[0]));
    if (r.text_at.size() >= 2 && r.tokens >= 2) {
      decode_tokens += r.tokens - 1;
      decode_seconds += ms_between(r.text_at.front(), r.text_at.back()) / 1e3;
    }
    for (size_t k = 1; k < r.text_at.size(); ++k) {
      const double gap = ms_between(r.text_at[k - 1], r.text_at[k]);
      itl.push_back(gap);
      if (long_request) (r.text_at[k] > long_from && r.text_at[k - 1] < long_to ? itl_beside_long : itl_otherwise).push_back(gap);
    }
  }
  nlohmann::ordered_json out = {{"label", o.label.empty() ? o.url : o.label},
                                {"clients", o.clients},
                                {"prompt_words", o.prompt_words},
                                {"prompt_tokens", load.requests.empty() ? 0 : prompt_tokens / int64_t(load.requests.size())},
                                {"gen", o.gen},
                                {"requests", load.requests.size()},
                                {"errors", load.errors},
                                {"seconds", rounded(load.seconds, 100)},
                                {"tok_per_s", rounded(double(tokens) / load.seconds, 100)},
                                {"stream_decode_tok_per_s", rounded(double(decode_tokens) / decode_seconds, 100)},
                                {"ttft_p50_ms", rounded(percentile(ttft, 50), 10)},
                                {"ttft_p99_ms", rounded(percentile(ttft, 99), 10)},
                                {"itl_p50_ms", rounded(percentile(itl, 50), 10)},
                                {"itl_p99_ms", rounded(percentile(itl, 99), 10)}};
  if (!load.first_error.empty()) out["first_error"] = load.first_error;
  if (long_request) {
    out["long_prompt_tokens"] = long_request->prompt_tokens;
    out["long_ttft_ms"] = rounded(ms_between(long_from, long_to), 10);
    out["itl_beside_long_count"] = itl_beside_long.size();
    out["itl_beside_long_p50_ms"] = rounded(percentile(itl_beside_long, 50), 10);
    out["itl_beside_long_p99_ms"] = rounded(percentile(itl_beside_long, 99), 10);
    out["itl_otherwise_p50_ms"] = rounded(percentile(itl_otherwise, 50), 10);
  }
  return out;
}

void bench_serve(const ServeBenchOptions& o) {
  if (o.url.rfind("http://", 0) != 0 && o.url.rfind("https://", 0) != 0)
    throw UsageError(fmt::format("--url: '{}' is not http://host:port", o.url));
  // cpp-httplib 0.11 writes without MSG_NOSIGNAL: a request sent on a
  // connection the server has just closed (a worker died, say) would end the
  // bench with SIGPIPE instead of counting a failed request.
  std::signal(SIGPIPE, SIG_IGN);
  const int total = o.requests > 0 ? o.requests : 2 * o.clients;
  std::atomic<int> first_texts{0};
  std::atomic<bool> load_done{false}, long_done{false};
  std::optional<RequestTimes> long_request;
  std::string long_failure;
  std::thread long_thread;
  if (o.long_prompt > 0)
    long_thread = std::thread([&] {
      // Once every client streams, so that the prompt is read beside running streams.
      while (first_texts < o.clients && !load_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (load_done) return;
      httplib::Client client(o.url);
      client.set_read_timeout(600, 0);
      std::atomic<int> unused{0};
      try {
        long_request = one_request(client, o, prompt_text(o.long_prompt, -1), 1, unused);
      } catch (const std::exception& e) {
        long_failure = e.what();
      }
      long_done = true;
    });
  LoadResult load;
  try {
    load = run_clients(o, total, first_texts, long_done);
  } catch (...) {
    load_done = true;
    if (long_thread.joinable()) long_thread.join();
    throw;
  }
  load_done = true;
  if (long_thread.joinable()) long_thread.join();
  if (!long_failure.empty()) throw Error(fmt::format("bench serve: --long-prompt request: {}", long_failure));

  std::printf("%s\n", summary(o, load, long_request).dump().c_str());
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
  cmd->add_option("--duration", o->duration,
                  "seconds: clients send requests until then (instead of --requests)")
      ->check(finite_in(0.1, 7 * 24 * 3600.0))
      ->excludes("--requests");
  cmd->add_option("--long-prompt", o->long_prompt,
                  "words of one extra request (1 token generated) sent once every client streams; the clients go "
                  "on until it is answered (instead of --requests or --duration); reports their inter-token latency "
                  "while it is read and otherwise")
      ->check(integer_in(1, 1 << 20))
      ->excludes("--requests")
      ->excludes("--duration");
  cmd->add_option("--api-key", o->api_key, "sent as Authorization: Bearer KEY");
  cmd->add_option("--label", o->label, "label of the result line (default: the URL)");
  cmd->callback([o] { bench_serve(*o); });
}

}  // namespace shardlm::cli
