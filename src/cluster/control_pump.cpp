#include "cluster/control_pump.h"

#include <fmt/format.h>
#include <poll.h>

#include "cluster/heartbeat.h"
#include "core/clock.h"
#include "core/error.h"

namespace shardlm::cluster {

ControlPump::ControlPump(Channel& channel, double peer_timeout_s, Fatal fatal)
    : ch_(channel), peer_timeout_s_(peer_timeout_s), fatal_(std::move(fatal)) {
  thread_ = std::thread([this] { loop(); });
}

ControlPump::~ControlPump() {
  stop_.store(true);
  thread_.join();
}

Message ControlPump::next_request() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return !requests_.empty(); });
  Message m = std::move(requests_.front());
  requests_.pop_front();
  return m;
}

void ControlPump::loop() {
  const auto interval = std::chrono::duration<double>(heartbeat_interval(peer_timeout_s_));
  auto last_heard = SteadyClock::now();
  auto last_sent = SteadyClock::now() - std::chrono::duration_cast<SteadyClock::duration>(interval);
  while (!stop_.load()) {
    if (SteadyClock::now() - last_sent >= interval) {
      try {
        ch_.send(MsgType::Heartbeat, nullptr, 0, after_seconds(interval.count()));
      } catch (const Error& e) {
        fatal_(e.what());
      }
      last_sent = SteadyClock::now();
    }
    pollfd p{ch_.fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      Message m;
      try {
        m = ch_.recv(after_seconds(peer_timeout_s_));
      } catch (const Error& e) {
        fatal_(e.what());
      }
      last_heard = SteadyClock::now();
      switch (m.type) {
        case MsgType::Heartbeat: break;
        case MsgType::Request: {
          std::lock_guard lock(mu_);
          requests_.push_back(std::move(m));
          cv_.notify_one();
          break;
        }
        case MsgType::Abort: {
          std::string reason = "(no reason)";
          try {
            reason = m.json().value("reason", reason);
          } catch (const Error&) {
          }
          fatal_(fmt::format("{}: the job was aborted: {}", ch_.peer(), reason));
          break;
        }
        default: fatal_(fmt::format("{}: unexpected {} message during the job", ch_.peer(), type_name(m.type)));
      }
    }
    const double silent = seconds_since(last_heard);
    if (silent > peer_timeout_s_)
      fatal_(fmt::format("{}: not responding for {:.1f} s (peer timeout {:g} s)", ch_.peer(), silent,
                         peer_timeout_s_));
  }
}

}  // namespace shardlm::cluster
