// `--comm-port PORT` or `--comm-port LO-HI`: where a job's links listen, so
// that a firewall can let them through (README, "Firewalls").
#pragma once

#include <cstdint>
#include <string>

#include "net/socket.h"

namespace shardlm::cluster {

struct PortRange {
  uint16_t low = 0, high = 0;  // 0-0: any port the OS chooses
  bool any() const { return low == 0; }
};

// "7900" or "7900-7999". Throws Error saying what is wrong with anything else
// (the caller names the flag).
PortRange parse_port_range(const std::string& text);
// Listening on the first free port of the range (on every interface). Throws
// Error naming `flag` when every port of the range is taken.
net::Fd listen_in_range(const PortRange& range, const std::string& flag);

}  // namespace shardlm::cluster
