// `--comm-port PORT` or `--comm-port LO-HI`: where a job's links listen (the
// coordinator's and the workers'), so that a firewall can let them through
// (README, "Firewalls").
#pragma once

#include <cstdint>
#include <string>

#include "net/socket.h"

namespace shardlm::net {

struct PortRange {
  uint16_t low = 0, high = 0;  // 0-0: any port the OS chooses
  bool any() const { return low == 0; }
  std::string str() const;  // "LO-HI", "" for any: parse_port_range reads it back
};

// "7900" or "7900-7999" ("" is any port). Throws Error saying what is wrong with anything else
// (the caller names the flag).
PortRange parse_port_range(const std::string& text);
// Listening on the first free port of the range (on every interface). Throws
// Error "<flag>: no free port in LO-HI (...)" when every port of it is taken.
net::Fd listen_in_range(const PortRange& range, const std::string& flag);

}  // namespace shardlm::net
