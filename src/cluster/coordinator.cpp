#include "cluster/coordinator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <cstdio>
#include <cstring>

#include "cluster/ask.h"
#include "cluster/dial.h"
#include "cluster/job_wire.h"
#include "core/clock.h"
#include "core/error.h"
#include "net/errors.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace shardlm::cluster {
namespace {

std::string with_port(const std::string& ip, uint16_t port) {
  return ip.find(':') != std::string::npos ? fmt::format("[{}]:{}", ip, port) : fmt::format("{}:{}", ip, port);
}

class Progress {
 public:
  // Frames only on a terminal: a log file gets one summary line instead.
  Progress(uint64_t total, bool on) : total_(total), on_(on && total > 0 && ::isatty(STDERR_FILENO)) {}
  ~Progress() {
    if (!on_ && total_ > 0) spdlog::info("sent {:.1f} MiB of slices", double(done_) / (1 << 20));
  }
  void add(uint64_t n) {
    done_ += n;
    const int pct = int(done_ * 100 / std::max<uint64_t>(total_, 1));
    if (on_ && pct != shown_) {
      shown_ = pct;
      std::fprintf(stderr, "\rsending slices: [%-40s] %3d%% %.1f/%.1f MiB", std::string(size_t(pct * 40 / 100), '#').c_str(),
                   pct, double(done_) / (1 << 20), double(total_) / (1 << 20));
      if (done_ >= total_) std::fputc('\n', stderr);
    }
  }

 private:
  uint64_t total_, done_ = 0;
  bool on_;
  int shown_ = -1;
};

}  // namespace

ClusterJob::ClusterJob(const gguf::File& file, const ClusterOptions& options) : opt_(options) {
  const auto t0 = SteadyClock::now();
  if (opt_.nodes.empty()) throw Error("--nodes: no workers given");
  const ModelConfig config = ModelConfig::from_gguf(file);
  n_vocab_ = config.n_vocab;

  // 1. Connect and authenticate; each worker describes its machine.
  std::vector<parallel::NodeSpec> nodes;
  connect_workers(nodes);

  // 2. Plan; a worker's own copy of the model is planned like a streamed one.
  place_workers(file, nodes);

  // 3. The job's communicator listens here; each worker gets the address it reached us on.
  net::Fd listener = net::listen_in_range(opt_.comm_ports, "--comm-port");
  const uint16_t comm_port = net::local_port(listener.get());
  spdlog::debug("the job's links from the workers come to port {}", comm_port);
  std::vector<std::vector<ByteRange>> ranges(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i) {
    ranges[i] = shard_ranges(file, config, plan_.ranks[i]);
    workers_[i]->send_json(MsgType::Job, job_message(i, file, ranges[i], comm_port), after_seconds(30));
  }
  // From here on a worker may be busy for long (receiving, loading): it beats, and so do we.
  std::vector<Channel*> channels;
  for (auto& w : workers_) channels.push_back(w.get());
  beats_ = std::make_unique<HeartbeatSender>(channels, heartbeat_interval(opt_.peer_timeout));

  // 4. Slices: only to workers that do not have them yet.
  if (opt_.worker_model.empty()) {
    std::vector<bool> need(workers_.size(), false);
    for (size_t i = 0; i < workers_.size(); ++i) {
      const auto status = workers_[i]->expect_json_live(MsgType::Status, opt_.peer_timeout);
      need[i] = status.value("status", "") == "need";
      if (!need[i]) ++stats_.cached;
    }
    send_slices(file, ranges, need);
  }
  for (auto& w : workers_) w->expect_json_live(MsgType::Status, opt_.peer_timeout);  // ready

  // 5. The job's communicator: rank 0 here, workers 1..n; the workers split off their own.
  join_world(std::move(listener));
  stats_.setup_seconds = seconds_since(t0);
}

void ClusterJob::place_workers(const gguf::File& file, const std::vector<parallel::NodeSpec>& nodes) {
  plan_ = parallel::make_plan(file, nodes, opt_.plan);
  if (plan_.size() > int(nodes.size()))
    throw Error(fmt::format("--nodes: the layout tp {} × pp {} needs {} workers, {} given", plan_.tp, plan_.pp,
                            plan_.size(), nodes.size()));
  for (int r = 0; r < plan_.size(); ++r)
    if (plan_.nodes[size_t(r)].name != nodes[size_t(r)].name)
      throw Error(fmt::format("planner placed rank {} on {}, expected {}", r, plan_.nodes[size_t(r)].name,
                              nodes[size_t(r)].name));
  if (plan_.size() < int(nodes.size())) {
    // The planner's layout leaves the last workers out: they go back to idle.
    for (size_t i = size_t(plan_.size()); i < nodes.size(); ++i)
      spdlog::info("{}: not used by the layout tp {} × pp {}", workers_[i]->peer(), plan_.tp, plan_.pp);
    workers_.resize(size_t(plan_.size()));
    opt_.nodes.resize(size_t(plan_.size()));
  }
}

nlohmann::json ClusterJob::job_message(size_t i, const gguf::File& file, const std::vector<ByteRange>& ranges,
                                       uint16_t comm_port) const {
  const bool stream = opt_.worker_model.empty();
  nlohmann::json model = {
      {"mode", stream ? "stream" : "local"}, {"file_size", file.file_size()}, {"shard_bytes", total_bytes(ranges)}};
  if (stream) {
    model["key"] = shard_key(file, ranges);
  } else {
    model["path"] = opt_.worker_model;
    model["fingerprint"] = model_fingerprint(file);
  }
  return {{"rank", int(i) + 1},
          {"size", plan_.size() + 1},
          {"comm_address", with_port(net::local_ip(workers_[i]->fd()), comm_port)},
          {"comm_ports", opt_.comm_ports.str()},
          {"plan", plan_to_json(plan_)},
          {"options",
           {{"n_ctx", opt_.plan.n_ctx}, {"n_seq", opt_.plan.n_seq}, {"n_batch", opt_.n_batch}, {"threads", opt_.threads},
            {"kv_type", dtype_name(opt_.plan.kv_type)}, {"peer_timeout", opt_.peer_timeout},
            {"batch_invariant", opt_.batch_invariant}}},
          {"model", model},
          {"memory_needed", stream ? plan_.costs[i].memory_bytes() : plan_.costs[i].kv_bytes}};
}

void ClusterJob::join_world(net::Fd listener) {
  comm::ConnectOptions co;
  co.backend = "tcp";
  co.rank = 0;
  co.size = plan_.size() + 1;
  co.listen_fd = listener.release();
  co.token = opt_.token;
  co.cluster_id = "shardlm-job";
  co.timeouts.op = std::chrono::seconds(120);
  // A worker that dies or goes silent now is named at once, not after timeouts.connect.
  co.while_waiting = [this] { watch(0); };
  try {
    world_ = comm::Communicator::connect(co);
    world_->split(-1, 0);
  } catch (const Error& e) {
    if (finished_) throw;  // fail_worker (from watch) has named the worker
    fail_job(e.what());
  }
}

ClusterJob::~ClusterJob() = default;

void ClusterJob::connect_workers(std::vector<parallel::NodeSpec>& nodes) {
  // Two names for one worker would wait for each other: refuse before connecting.
  std::map<std::string, std::string> seen;
  for (const auto& address : opt_.nodes) {
    const std::string resolved = resolve_address(address, "--nodes");
    const auto [at, fresh] = seen.emplace(resolved, address);
    if (!fresh)
      throw Error(fmt::format("--nodes: '{}' and '{}' are the same worker ({})", at->second, address, resolved));
  }
  for (const auto& address : opt_.nodes) {
    workers_.push_back(open_worker_channel(address, opt_.token, opt_.peer_timeout));
    const std::string& who = workers_.back()->peer();
    const auto info = workers_.back()->expect_json(MsgType::Info, after_seconds(opt_.peer_timeout + kInfoGraceSeconds));
    // A busy worker follows its Info with a Status error saying whose job it serves.
    if (info.value("state", "idle") == "busy") workers_.back()->expect_json(MsgType::Status, after_seconds(opt_.peer_timeout));
    const parallel::NodeSpec n = node_from_info(address, info);
    spdlog::info("{}: {} cores, {:.0f} MiB available, {:.1f} GB/s", who, n.cores, double(n.memory_bytes) / (1 << 20),
                 n.memory_bandwidth_gbs);
    nodes.push_back(n);
  }
}

void ClusterJob::send_slices(const gguf::File& file, const std::vector<std::vector<ByteRange>>& ranges,
                             const std::vector<bool>& need) {
  uint64_t total = 0;
  for (size_t i = 0; i < ranges.size(); ++i)
    if (need[i]) total += total_bytes(ranges[i]);
  Progress progress(total, opt_.progress);
  const uint8_t* base = file_bytes(file);
  std::vector<uint8_t> msg;
  msg.reserve(kMaxDataBytes + 16);
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (!need[i]) continue;
    auto flush = [&] {
      if (msg.empty()) return;
      workers_[i]->send_live(MsgType::Data, msg.data(), msg.size(), opt_.peer_timeout);
      msg.clear();
    };
    for (const auto& r : ranges[i]) {
      for (uint64_t done = 0; done < r.length;) {
        if (msg.size() + 16 + 4096 > kMaxDataBytes) flush();
        const uint64_t len = std::min<uint64_t>(r.length - done, kMaxDataBytes - msg.size() - 16);
        const uint64_t off = r.offset + done;
        const size_t at = msg.size();
        msg.resize(at + 16 + len);
        std::memcpy(msg.data() + at, &off, 8);
        std::memcpy(msg.data() + at + 8, &len, 8);
        std::memcpy(msg.data() + at + 16, base + off, len);
        done += len;
        stats_.bytes_sent += len;
        progress.add(len);
      }
    }
    flush();
    workers_[i]->send_live(MsgType::DataEnd, nullptr, 0, opt_.peer_timeout);
  }
}

std::vector<parallel::SlotToken> ClusterJob::run(const parallel::StepMessage& message) {
  if (finished_) throw Error(fmt::format("cluster: the job is over{}", failure_.empty() ? "" : ": " + failure_));
  const std::vector<uint8_t> payload = message.encode();
  try {
    workers_[0]->send(MsgType::Request, payload.data(), payload.size(), after_seconds(opt_.peer_timeout));
  } catch (const Error& e) {
    fail_worker(0, Fault::Lost, e.what());
  }
  for (;;) {
    std::optional<Message> answer = watch(50);
    if (answer) return step_tokens(answer->payload, message);
  }
}

void ClusterJob::check_idle() {
  if (finished_) return;
  if (watch(0)) fail_worker(0, Fault::Reported, "a Token message while no step ran");
}

// Reads what the workers sent within `timeout_ms`: heartbeats, the driver's
// Token frame (returned), anything else or silence for peer_timeout fails the job.
std::optional<Message> ClusterJob::watch(int timeout_ms) {
  if (last_heard_.empty()) last_heard_.assign(workers_.size(), SteadyClock::now());
  std::vector<pollfd> fds(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i) fds[i] = {workers_[i]->fd(), POLLIN, 0};
  ::poll(fds.data(), fds.size(), timeout_ms);
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!fds[i].revents) continue;
    Message m;
    try {
      m = workers_[i]->recv(after_seconds(opt_.peer_timeout));
    } catch (const Error& e) {
      fail_worker(i, Fault::Lost, e.what());
    }
    last_heard_[i] = SteadyClock::now();
    if (m.type == MsgType::Heartbeat) continue;
    if (m.type == MsgType::Token && i == 0) return m;
    std::string what = fmt::format("unexpected {} message", type_name(m.type));
    if (m.type == MsgType::Status) {
      try {
        what = m.json().value("message", "unspecified error");
      } catch (const Error& e) {
        what = e.what();
      }
    }
    fail_worker(i, Fault::Reported, what);
  }
  for (size_t i = 0; i < workers_.size(); ++i)
    if (seconds_since(last_heard_[i]) > opt_.peer_timeout)
      fail_worker(i, Fault::Silent, "");
  return std::nullopt;
}

// The driver's answer to a step: one (slot, token) per sampling entry, in entry order.
std::vector<parallel::SlotToken> ClusterJob::step_tokens(const std::vector<uint8_t>& payload,
                                                         const parallel::StepMessage& message) {
  std::vector<parallel::SlotToken> tokens;
  try {
    tokens = parallel::decode_tokens(payload, opt_.plan.n_seq, n_vocab_, "Token message");
  } catch (const Error& e) {
    fail_worker(0, Fault::Reported, e.what());
  }
  size_t k = 0;
  for (const auto& e : message.entries.entries) {
    if (!e.want_logits || message.kind != parallel::StepKind::Step) continue;
    if (k >= tokens.size() || tokens[k].slot != e.seq || tokens[k].token < 0 || tokens[k].token >= n_vocab_)
      fail_worker(0, Fault::Reported, fmt::format("Token message does not answer the step's entry for slot {}", e.seq));
    ++k;
  }
  if (k != tokens.size()) fail_worker(0, Fault::Reported, fmt::format("{} tokens for {} sampling entries", tokens.size(), k));
  return tokens;
}

std::vector<std::vector<RequestStats>> ClusterJob::finish() {
  if (finished_) throw Error("cluster: the job is finished");
  finished_ = true;
  parallel::StepMessage end;
  end.kind = parallel::StepKind::Shutdown;
  const auto payload = end.encode();
  try {
    workers_[0]->send(MsgType::Request, payload.data(), payload.size(), after_seconds(opt_.peer_timeout));
  } catch (const Error& e) {
    fail_worker(0, Fault::Lost, e.what());
  }
  std::vector<std::vector<RequestStats>> stats(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i) {
    try {
      const auto done = workers_[i]->expect_json(MsgType::Status, after_seconds(30));
      const auto requests = done.value("requests", nlohmann::json::array());
      if (!requests.is_array()) throw Error(fmt::format("{}: Status 'requests' is not an array", workers_[i]->peer()));
      for (const auto& r : requests) stats[i].push_back(request_stats_from_json(r, workers_[i]->peer()));
    } catch (const Error& e) {
      spdlog::warn("{}", e.what());
    }
  }
  beats_.reset();
  return stats;
}

void ClusterJob::fail_worker(size_t i, Fault fault, const std::string& what) {
  const std::string who = fmt::format("{} (rank {})", opt_.nodes[i], i + 1);
  if (fault == Fault::Reported) {
    // A worker's report of a comm error may come before the EOF of the worker
    // whose death caused it: look for that one a moment before blaming.
    const auto deadline = after_seconds(std::min(1.5, opt_.peer_timeout));
    for (size_t j = 0; j < workers_.size(); ++j) {
      if (j == i) continue;
      try {
        for (;;) {
          Message m = workers_[j]->recv_skipping_heartbeats(deadline);
          if (m.type == MsgType::Status) break;
        }
      } catch (const net::PeerClosedError& e) {
        fail_worker(j, Fault::Lost, e.what());
      } catch (const Error&) {
      }
    }
  }
  std::string message;
  switch (fault) {
    case Fault::Lost:
      message = fmt::format("worker {} failed (connection lost); the job was stopped: {}", who, what);
      break;
    case Fault::Silent:
      message = fmt::format("worker {} not responding for {:g} s (--peer-timeout); the job was stopped", who,
                            opt_.peer_timeout);
      break;
    case Fault::Reported: message = reported_by("worker " + opt_.nodes[i], what); break;
  }
  // The others may be blocked waiting for the failed one: tell them to give up.
  beats_.reset();
  for (size_t j = 0; j < workers_.size(); ++j) {
    if (j == i) continue;
    try {
      workers_[j]->send_json(MsgType::Abort, {{"reason", message}}, after_seconds(0.5));
    } catch (const Error&) {
    }
  }
  world_.reset();
  finished_ = true;
  failure_ = message;
  if (fault != Fault::Reported) lost_nodes_.push_back(opt_.nodes[i]);
  throw Error(message);
}

// Which worker failed: a live one reports its own error on the control
// connection (it was released by the communicator's abort); a dead one's
// connection is closed without a word.
void ClusterJob::fail_job(const std::string& what) {
  std::vector<std::string> dead, errors;
  const auto deadline = after_seconds(3);
  for (size_t i = 0; i < workers_.size(); ++i) {
    try {
      Message m = workers_[i]->recv_skipping_heartbeats(deadline);
      if (m.type == MsgType::Status) {
        auto j = m.json();
        if (j.value("status", "") == "error") errors.push_back(reported_by("worker " + opt_.nodes[i], j.value("message", "")));
      }
    } catch (const net::TimeoutError&) {
      dead.push_back(fmt::format("{} (rank {}, not responding)", opt_.nodes[i], i + 1));
      lost_nodes_.push_back(opt_.nodes[i]);
    } catch (const Error&) {
      dead.push_back(fmt::format("{} (rank {})", opt_.nodes[i], i + 1));
      lost_nodes_.push_back(opt_.nodes[i]);
    }
  }
  world_.reset();
  if (!dead.empty())
    throw Error(fmt::format("worker {} failed (connection lost); the job was stopped: {}", fmt::join(dead, ", "), what));
  if (!errors.empty()) throw Error(errors.front());
  throw Error(fmt::format("cluster job failed: {}", what));
}

}  // namespace shardlm::cluster
