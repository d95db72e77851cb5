// The control connection between a coordinator and a worker: authenticated
// with the comm layer's HMAC handshake (cluster id "shardlm-worker"), then
// framed messages. Every frame is checked: magic, known type, and a length
// bounded per type, so a confused or hostile peer cannot make us allocate;
// then its tag, so no one without the token can alter, replay or inject one.
//
// Frame = 16-byte header + payload + 16-byte tag:
//   u32 magic "SLMW", u32 type, u64 length (of the payload)
//   tag: net/frame_auth.h's, keyed by the handshake's session key, so a frame
//   altered, replayed, reordered or forged on the way is refused
// Conversation (one job per connection):
//   worker → Info {memory_bytes, cores, bandwidth_gbs, host, version, protocol, cpu,
//                  state "idle"|"busy", serving, since, cached,
//                  kernel_rates (optional: parallel/kernel_rates.h),
//                  token_costs (optional: parallel/token_costs.h)}
//            (busy: then Status error "worker busy (...)" and the worker closes;
//            `shardlm status` reads the Info and closes)
//   coord  → Job  {rank, size, comm address, plan, options, shard}
//   worker → Status {"have"|"need"|"ready"|"error", message}
//   coord  → Data* (records: u64 file offset, u64 length, bytes), DataEnd
//   worker → Status ready | error
//   ... the job runs: the workers compute over the comm layer; the
//       coordinator sends Request frames to the driving worker (rank 1) on
//       this connection and gets Token frames back, until a Shutdown step
//       ends the job (cluster/job_wire.h). From the Job message on (so
//       through the transfer and loading too) both sides send a Heartbeat
//       every peer_timeout / 6; a side that hears nothing for peer_timeout
//       (no frame, nor a byte of a long one) declares the other dead. The
//       coordinator relays a worker's death to the others with Abort ...
//   worker → Status done {requests: [RequestStats per request]} | error
//            (then closes; the worker is idle again)
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "net/frame_auth.h"
#include "net/handshake.h"
#include "net/socket.h"
#include "parallel/planner.h"
#include "parallel/distributed_session.h"

namespace shardlm::cluster {

constexpr const char* kClusterId = "shardlm-worker";

constexpr const char* kVersion = "0.1.0";
// The frames' formats: a coordinator refuses a worker that speaks another
// (Info "protocol"; absent in builds before 2, which carried no log-probabilities).
constexpr int64_t kProtocol = 2;

enum class MsgType : uint32_t {
  Info = 1,
  Job = 2,
  Status = 3,
  Data = 4,
  DataEnd = 5,
  Heartbeat = 6,  // empty
  Request = 7,    // one step of the workers' engine (cluster/job_wire.h)
  Token = 8,      // the step's sampled tokens
  Abort = 9,      // {"reason"}: the job is over, another member failed
};

constexpr size_t kMaxJsonBytes = size_t(16) << 20;  // a plan of many ranks fits easily
constexpr size_t kMaxDataBytes = size_t(8) << 20;   // one Data frame

struct Message {
  MsgType type{};
  std::vector<uint8_t> payload;
  nlohmann::json json() const;  // throws Error naming `who` on bad JSON
};

// "PEER: WHAT" for an error a peer reported. A worker's own messages name it
// by host name ("worker HOST: ..."): where PEER is "worker ADDRESS", the host
// goes in parentheses, so the worker is named once.
std::string reported_by(std::string_view peer, std::string_view what);

// A control connection. send() may be called from two threads at once (a
// heartbeat thread and the job's thread); recv() from one at a time.
class Channel {
 public:
  // `auth`: made from authenticate_control's key on this connection and this
  // end's role in it (or handed over with the connection: auth()).
  Channel(net::Fd fd, std::string peer, net::FrameAuth auth)
      : auth_(std::move(auth)), fd_(std::move(fd)), peer_(std::move(peer)) {}
  const net::FrameAuth& auth() const { return auth_; }
  const std::string& peer() const { return peer_; }
  int fd() const { return fd_.get(); }
  void close() { fd_.reset(); }

  void send(MsgType type, const void* data, size_t bytes, Deadline deadline);
  void send_json(MsgType type, const nlohmann::json& j, Deadline deadline);
  // A Heartbeat, unless another frame is being sent right now: its bytes
  // already show the peer we are alive, and a beat must not wait behind a
  // large frame on a slow link (the other channels' beats would wait too).
  void send_heartbeat(Deadline deadline);
  Message recv(Deadline deadline);
  // The next message that is not a Heartbeat.
  Message recv_skipping_heartbeats(Deadline deadline);
  // recv_skipping_heartbeats() that also insists on the type (a Status
  // "error" becomes an Error with its message).
  nlohmann::json expect_json(MsgType type, Deadline deadline);

  // The same without a deadline for the whole: however long the peer takes
  // (a worker loading its slices, a transfer over a slow link), it must show
  // it is alive at least every `silence_s` (any frame, Heartbeats included,
  // or any bytes of a long frame). A silent peer is an Error
  // "<peer>: not responding for S s (--peer-timeout)".
  void send_live(MsgType type, const void* data, size_t bytes, double silence_s);
  Message recv_live(double silence_s);  // skips Heartbeats
  nlohmann::json expect_json_live(MsgType type, double silence_s);

 private:
  // A frame read or written by `pace`: a deadline for the whole, or silence_s
  // from the last bytes that moved.
  struct Pace {
    Deadline whole;  // used when silence_s == 0
    double silence_s = 0;
    Deadline next() const;
  };
  // Frames up to this payload are written with one write().
  static constexpr size_t kGatheredBytes = 64 << 10;
  void write_frame(MsgType type, const void* data, size_t bytes, const Pace& pace);  // send_mu_ held
  void send_paced(MsgType type, const void* data, size_t bytes, const Pace& pace);
  Message recv_paced(const Pace& pace);
  nlohmann::json checked_json(const Message& m, MsgType type) const;
  // Called in the handler of a net::TimeoutError: the peer's silence, named as such.
  [[noreturn]] void throw_silent(const Pace& pace) const;

  std::mutex send_mu_;
  net::FrameAuth auth_;  // seal() under send_mu_; verify() by the one receiving thread
  net::Fd fd_;
  std::string peer_;
};

// The HMAC handshake that opens a control connection (cluster id kClusterId),
// from either end; returns the session key the connection's Channel checks
// its frames with; throws Error naming `who`.
net::SessionKey authenticate_control(int fd, net::Role role, const std::string& token, Deadline deadline,
                                     const std::string& who);
const char* type_name(MsgType t);
// "2026-12-01T10:53:02Z"
std::string utc_time_text(std::chrono::system_clock::time_point t);

nlohmann::json plan_to_json(const parallel::Plan& plan);
parallel::Plan plan_from_json(const nlohmann::json& j, const std::string& who);

// Where a worker's time went in one period of a job (between the driver's marks).
struct RequestStats {
  parallel::RankStats total;
};
nlohmann::json request_stats_to_json(const RequestStats& s);
RequestStats request_stats_from_json(const nlohmann::json& j, const std::string& who);

}  // namespace shardlm::cluster
