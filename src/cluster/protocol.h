// The control connection between a coordinator and a worker: authenticated
// with the comm layer's HMAC handshake (cluster id "shardlm-worker"), then
// framed messages. Every frame is checked: magic, known type, and a length
// bounded per type, so a confused or hostile peer cannot make us allocate.
//
// Frame = 16-byte header + payload:
//   u32 magic "SLMW", u32 type, u64 length
// Conversation (one job per connection):
//   worker → Info {memory_bytes, cores, bandwidth_gbs, host, kernel_rates (optional:
//            parallel/kernel_rates.h)}
//   coord  → Job  {rank, size, comm address, plan, options, shard}
//   worker → Status {"have"|"need"|"ready"|"error", message}
//   coord  → Data* (records: u64 file offset, u64 length, bytes), DataEnd
//   worker → Status ready | error
//   ... the job runs over the comm layer (coordinator = world rank 0): one or
//       more requests, ended by an empty one (cluster/job_wire.h) ...
//   worker → Status done {requests: [RequestStats per request]} | error
//            (then closes; the worker is idle again)
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/tcp_socket.h"
#include "parallel/planner.h"
#include "parallel/runtime.h"

namespace shardlm::cluster {

constexpr const char* kClusterId = "shardlm-worker";

enum class MsgType : uint32_t { Info = 1, Job = 2, Status = 3, Data = 4, DataEnd = 5 };

constexpr size_t kMaxJsonBytes = size_t(16) << 20;  // a plan of many ranks fits easily
constexpr size_t kMaxDataBytes = size_t(8) << 20;   // one Data frame

struct Message {
  MsgType type{};
  std::vector<uint8_t> payload;
  nlohmann::json json() const;  // throws Error naming `who` on bad JSON
};

class Channel {
 public:
  Channel(comm::tcp::Fd fd, std::string peer) : fd_(std::move(fd)), peer_(std::move(peer)) {}
  const std::string& peer() const { return peer_; }
  int fd() const { return fd_.get(); }

  void send(MsgType type, const void* data, size_t bytes, comm::Deadline deadline);
  void send_json(MsgType type, const nlohmann::json& j, comm::Deadline deadline);
  Message recv(comm::Deadline deadline);
  // recv() that also insists on the type (a Status "error" becomes an Error with its message).
  nlohmann::json expect_json(MsgType type, comm::Deadline deadline);

 private:
  comm::tcp::Fd fd_;
  std::string peer_;
};

comm::Deadline after_seconds(double s);

nlohmann::json plan_to_json(const parallel::Plan& plan);
parallel::Plan plan_from_json(const nlohmann::json& j, const std::string& who);

// Where a worker's time went in one request of a job. The driving worker
// also reports the part up to its first token (prompt processing); the
// others cannot tell where that boundary was.
struct RequestStats {
  parallel::RuntimeStats total;
  std::optional<parallel::RuntimeStats> to_first_token;
};
nlohmann::json request_stats_to_json(const RequestStats& s);
RequestStats request_stats_from_json(const nlohmann::json& j, const std::string& who);

}  // namespace shardlm::cluster
