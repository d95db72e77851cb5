#include "cluster/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string_view>
#include <ctime>

#include "cluster/job_wire.h"

#include "core/error.h"
#include "core/json_nesting.h"
#include "net/errors.h"
#include "parallel/wire_format.h"

namespace shardlm::cluster {
namespace {

constexpr uint32_t kMagic = 0x574d4c53;  // "SLMW" little-endian

struct Header {
  uint32_t magic = kMagic;
  uint32_t type = 0;
  uint64_t length = 0;
};
static_assert(sizeof(Header) == 16);

size_t max_length(MsgType t) {
  switch (t) {
    case MsgType::Info:
    case MsgType::Job:
    case MsgType::Status: return kMaxJsonBytes;
    case MsgType::Data: return kMaxDataBytes + 16;
    case MsgType::DataEnd:
    case MsgType::Heartbeat: return 0;
    case MsgType::Request: return kMaxStepBytes;
    case MsgType::Token: return kMaxTokensPerFrame * parallel::kMaxEncodedTokenBytes;
    case MsgType::Abort: return 4096;
  }
  return 0;
}

bool known_type(uint32_t t) { return t >= uint32_t(MsgType::Info) && t <= uint32_t(MsgType::Abort); }

Range range_from(const nlohmann::json& a, const std::string& who) {
  if (!a.is_array() || a.size() != 2 || !a[0].is_number_integer() || !a[1].is_number_integer())
    throw Error(fmt::format("{}: plan range is not [begin, end]", who));
  Range r{a[0].get<int64_t>(), a[1].get<int64_t>()};
  if (r.begin < 0 || r.end < r.begin) throw Error(fmt::format("{}: plan range [{}, {}) is invalid", who, r.begin, r.end));
  return r;
}

}  // namespace

const char* type_name(MsgType t) {
  switch (t) {
    case MsgType::Info: return "Info";
    case MsgType::Job: return "Job";
    case MsgType::Status: return "Status";
    case MsgType::Data: return "Data";
    case MsgType::DataEnd: return "DataEnd";
    case MsgType::Heartbeat: return "Heartbeat";
    case MsgType::Request: return "Request";
    case MsgType::Token: return "Token";
    case MsgType::Abort: return "Abort";
  }
  return "?";
}

std::string utc_time_text(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

net::SessionKey authenticate_control(int fd, net::Role role, const std::string& token, Deadline deadline,
                                     const std::string& who) {
  net::HandshakeParams hp;
  hp.token = token;
  hp.cluster_id = kClusterId;
  return net::handshake(fd, role, hp, deadline, who).session_key;
}

nlohmann::json Message::json() const {
  if (json_nests_deeper_than({reinterpret_cast<const char*>(payload.data()), payload.size()}))
    throw Error(fmt::format("{} message nests arrays and objects more than {} deep", type_name(type), kMaxJsonNesting));
  auto j = nlohmann::json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error(fmt::format("{} message is not a JSON object", type_name(type)));
  return j;
}

Deadline Channel::Pace::next() const { return silence_s > 0 ? after_seconds(silence_s) : whole; }

void Channel::throw_silent(const Pace& pace) const {
  // No byte moved for silence_s.
  if (pace.silence_s > 0)
    throw net::TimeoutError(fmt::format("{}: not responding for {:g} s (--peer-timeout)", peer_, pace.silence_s));
  throw;
}

void Channel::write_frame(MsgType type, const void* data, size_t bytes, const Pace& pace) {
  Header h;
  h.type = uint32_t(type);
  h.length = bytes;
  const std::span<const uint8_t> header = net::bytes_of(h);
  const std::span<const uint8_t> payload(static_cast<const uint8_t*>(data), bytes);
  const net::FrameTag tag = auth_.seal({header, payload});
  try {
    // A small frame in one write: one segment under TCP_NODELAY, not three.
    if (bytes <= kGatheredBytes) {
      std::vector<uint8_t> frame(header.begin(), header.end());
      frame.insert(frame.end(), payload.begin(), payload.end());
      frame.insert(frame.end(), tag.begin(), tag.end());
      net::write_all(fd_.get(), frame.data(), frame.size(), pace.next(), peer_, pace.silence_s);
      return;
    }
    net::write_all(fd_.get(), &h, sizeof h, pace.next(), peer_, pace.silence_s);
    net::write_all(fd_.get(), data, bytes, pace.next(), peer_, pace.silence_s);
    net::write_all(fd_.get(), tag.data(), tag.size(), pace.next(), peer_, pace.silence_s);
  } catch (const net::TimeoutError&) {
    throw_silent(pace);
  }
}

void Channel::send_paced(MsgType type, const void* data, size_t bytes, const Pace& pace) {
  std::lock_guard lock(send_mu_);
  write_frame(type, data, bytes, pace);
}

Message Channel::recv_paced(const Pace& pace) {
  Header h;
  Message m;
  try {
    net::read_all(fd_.get(), &h, sizeof h, pace.next(), peer_, pace.silence_s);
    if (h.magic != kMagic) throw Error(fmt::format("{}: bad control frame magic 0x{:08x}", peer_, h.magic));
    if (!known_type(h.type)) throw Error(fmt::format("{}: unknown control frame type {}", peer_, h.type));
    m.type = MsgType(h.type);
    if (h.length > max_length(m.type))
      throw Error(fmt::format("{}: {} frame of {} bytes exceeds the limit of {}", peer_, type_name(m.type), h.length,
                              max_length(m.type)));
    m.payload.resize(size_t(h.length));
    net::read_all(fd_.get(), m.payload.data(), m.payload.size(), pace.next(), peer_, pace.silence_s);
    net::FrameTag tag;
    net::read_all(fd_.get(), tag.data(), tag.size(), pace.next(), peer_, pace.silence_s);
    if (!auth_.verify({net::bytes_of(h), m.payload}, tag))
      throw Error(fmt::format("{}: control frame {} ({}) failed its integrity check: altered, replayed or not "
                              "from the peer that authenticated",
                              peer_, auth_.received(), type_name(m.type)));
  } catch (const net::TimeoutError&) {
    throw_silent(pace);
  }
  return m;
}

nlohmann::json Channel::checked_json(const Message& m, MsgType type) const {
  if (m.type != type)
    throw Error(fmt::format("{}: expected a {} message, got {}", peer_, type_name(type), type_name(m.type)));
  nlohmann::json j;
  try {
    j = m.json();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", peer_, e.what()));
  }
  if (type == MsgType::Status && j.value("status", "") == "error")
    throw Error(reported_by(peer_, j.value("message", "unspecified error")));
  return j;
}

void Channel::send(MsgType type, const void* data, size_t bytes, Deadline deadline) {
  send_paced(type, data, bytes, Pace{deadline, 0});
}

void Channel::send_heartbeat(Deadline deadline) {
  std::unique_lock lock(send_mu_, std::try_to_lock);
  if (!lock) return;
  write_frame(MsgType::Heartbeat, nullptr, 0, Pace{deadline, 0});
}

void Channel::send_json(MsgType type, const nlohmann::json& j, Deadline deadline) {
  const std::string text = j.dump();
  send(type, text.data(), text.size(), deadline);
}

Message Channel::recv(Deadline deadline) { return recv_paced(Pace{deadline, 0}); }

Message Channel::recv_skipping_heartbeats(Deadline deadline) {
  for (;;) {
    Message m = recv(deadline);
    if (m.type != MsgType::Heartbeat) return m;
  }
}

nlohmann::json Channel::expect_json(MsgType type, Deadline deadline) {
  return checked_json(recv_skipping_heartbeats(deadline), type);
}

void Channel::send_live(MsgType type, const void* data, size_t bytes, double silence_s) {
  send_paced(type, data, bytes, Pace{{}, silence_s});
}

Message Channel::recv_live(double silence_s) {
  for (;;) {
    Message m = recv_paced(Pace{{}, silence_s});
    if (m.type != MsgType::Heartbeat) return m;
  }
}

nlohmann::json Channel::expect_json_live(MsgType type, double silence_s) {
  return checked_json(recv_live(silence_s), type);
}

nlohmann::json plan_to_json(const parallel::Plan& plan) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : plan.ranks) {
    ranks.push_back({{"layers", {r.layers.begin, r.layers.end}},
                     {"heads", {r.heads.begin, r.heads.end}},
                     {"kv_heads", {r.kv_heads.begin, r.kv_heads.end}},
                     {"ff_rows", {r.ff_rows.begin, r.ff_rows.end}},
                     {"ff_held", {r.ff_held.begin, r.ff_held.end}},
                     {"vocab_rows", {r.vocab_rows.begin, r.vocab_rows.end}},
                     {"vocab_held", {r.vocab_held.begin, r.vocab_held.end}},
                     {"experts", {r.experts.begin, r.experts.end}},
                     {"expert_rows", {r.expert_rows.begin, r.expert_rows.end}},
                     {"shared_rows", {r.shared_rows.begin, r.shared_rows.end}}});
  }
  return {{"tp", plan.tp}, {"pp", plan.pp}, {"ranks", ranks}, {"wire_type", parallel::wire_type_name(plan.wire_type)}};
}

parallel::Plan plan_from_json(const nlohmann::json& j, const std::string& who) {
  parallel::Plan p;
  try {
    p.tp = j.at("tp").get<int>();
    p.pp = j.at("pp").get<int>();
    if (p.tp < 1 || p.pp < 1 || p.tp > 4096 || p.pp > 4096 || !j.at("ranks").is_array() ||
        j.at("ranks").size() != size_t(p.tp) * size_t(p.pp))
      throw Error("bad tp/pp/ranks");
    for (const auto& r : j.at("ranks")) {
      RankPlan rp;
      rp.layers = range_from(r.at("layers"), who);
      rp.heads = range_from(r.at("heads"), who);
      rp.kv_heads = range_from(r.at("kv_heads"), who);
      rp.ff_rows = range_from(r.at("ff_rows"), who);
      // Absent in plans from before row balancing: no margins.
      rp.ff_held = r.contains("ff_held") ? range_from(r.at("ff_held"), who) : rp.ff_rows;
      rp.vocab_rows = range_from(r.at("vocab_rows"), who);
      rp.vocab_held = r.contains("vocab_held") ? range_from(r.at("vocab_held"), who) : rp.vocab_rows;
      // Absent in plans from before expert parallelism: no experts.
      if (r.contains("experts")) {
        rp.experts = range_from(r.at("experts"), who);
        rp.expert_rows = range_from(r.at("expert_rows"), who);
        rp.shared_rows = range_from(r.at("shared_rows"), who);
      }
      p.ranks.push_back(rp);
    }
    // Absent in plans from before --wire-type: exact f32.
    if (j.contains("wire_type"))
      p.wire_type = parallel::wire_type_from_name(j.at("wire_type").get<std::string>(), "plan wire_type");
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: malformed plan in Job message: {}", who, e.what()));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: malformed plan in Job message: {}", who, e.what()));
  }
  return p;
}

namespace {

nlohmann::json stats_to_json(const parallel::RankStats& s) {
  return {{"forward_seconds", s.forward_seconds},     {"collective_seconds", s.collective_seconds},
          {"all_reduce_seconds", s.all_reduce_seconds}, {"p2p_wait_seconds", s.p2p_wait_seconds},
          {"total_seconds", s.total_seconds},           {"all_reduces", s.all_reduces},
          {"forward_calls", s.forward_calls},           {"tokens", s.tokens},
          {"bytes_sent", s.bytes_sent}};
}

parallel::RankStats stats_from_json(const nlohmann::json& j) {
  parallel::RankStats s;
  s.forward_seconds = j.at("forward_seconds").get<double>();
  s.collective_seconds = j.at("collective_seconds").get<double>();
  s.all_reduce_seconds = j.at("all_reduce_seconds").get<double>();
  s.p2p_wait_seconds = j.at("p2p_wait_seconds").get<double>();
  s.total_seconds = j.at("total_seconds").get<double>();
  s.all_reduces = j.at("all_reduces").get<int64_t>();
  s.forward_calls = j.at("forward_calls").get<int64_t>();
  s.tokens = j.at("tokens").get<int64_t>();
  s.bytes_sent = j.at("bytes_sent").get<double>();
  return s;
}

}  // namespace

nlohmann::json request_stats_to_json(const RequestStats& s) {
  nlohmann::json j = {{"total", stats_to_json(s.total)}};
  return j;
}

RequestStats request_stats_from_json(const nlohmann::json& j, const std::string& who) {
  RequestStats s;
  try {
    s.total = stats_from_json(j.at("total"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: malformed rank stats in Status message: {}", who, e.what()));
  }
  return s;
}

std::string reported_by(std::string_view peer, std::string_view what) {
  constexpr std::string_view kWorker = "worker ";
  const size_t colon = peer.starts_with(kWorker) && what.starts_with(kWorker) ? what.find(": ") : std::string_view::npos;
  const std::string_view host = colon == std::string_view::npos ? std::string_view() : what.substr(kWorker.size(), colon - kWorker.size());
  if (host.empty() || host.find(' ') != std::string_view::npos) return fmt::format("{}: {}", peer, what);
  const std::string_view address = peer.substr(kWorker.size()), rest = what.substr(colon + 2);
  return host == address ? fmt::format("{}: {}", peer, rest) : fmt::format("{} ({}): {}", peer, host, rest);
}

}  // namespace shardlm::cluster
