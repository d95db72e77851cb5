#include "cluster/dial.h"

#include <fmt/format.h>

#include <chrono>

#include "core/error.h"
#include "net/errors.h"

namespace shardlm::cluster {

net::Fd dial(const std::string& address, double timeout_s, const std::string& who) {
  const auto where = net::parse_host_port(address, "--nodes");
  const Deadline deadline =
      SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(timeout_s));
  int err = 0;
  net::Fd fd;
  try {
    fd = net::try_connect_once(where, deadline, &err);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", who, e.what()));
  }
  if (!fd) throw Error(fmt::format("{}: cannot connect: {}", who, net::errno_text(err)));
  return fd;
}

std::unique_ptr<Channel> open_worker_channel(const std::string& address, const std::string& token, double timeout_s) {
  const std::string who = "worker " + address;
  net::Fd fd = dial(address, timeout_s, who);
  net::SessionKey key;
  try {
    key = authenticate_control(fd.get(), net::Role::Connector, token, after_seconds(timeout_s), who);
  } catch (const net::TimeoutError&) {
    throw Error(fmt::format("{}: not responding for {:g} s (the handshake; --peer-timeout)", who, timeout_s));
  }
  return std::make_unique<Channel>(std::move(fd), who, net::FrameAuth(key, net::Role::Connector));
}

std::string resolve_address(const std::string& address, const std::string& what) {
  const auto where = net::parse_host_port(address, what);
  try {
    return net::resolve_numeric(where);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: '{}': {}", what, address, e.what()));
  }
}

}  // namespace shardlm::cluster
