#include "net/port_range.h"

#include <fmt/format.h>

#include <charconv>

#include "core/error.h"

namespace shardlm::net {
namespace {

uint16_t parse_port(std::string_view text, const std::string& whole) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    throw Error(fmt::format("'{}' is not a port or a range LO-HI", whole));
  if (value < 1 || value > 65535) throw Error(fmt::format("port {} is not in [1, 65535]", value));
  return uint16_t(value);
}

}  // namespace

std::string PortRange::str() const { return any() ? "" : fmt::format("{}-{}", low, high); }

PortRange parse_port_range(const std::string& text) {
  if (text.empty()) return {};
  const auto dash = text.find('-');
  PortRange r;
  r.low = parse_port(std::string_view(text).substr(0, dash), text);
  r.high = dash == std::string::npos ? r.low : parse_port(std::string_view(text).substr(dash + 1), text);
  if (r.high < r.low) throw Error(fmt::format("range '{}' ends before it starts", text));
  return r;
}

net::Fd listen_in_range(const PortRange& range, const std::string& flag) {
  if (range.any()) return net::listen_on(net::HostPort{"", 0});
  std::string last;
  for (unsigned port = range.low; port <= range.high; ++port) {
    try {
      return net::listen_on(net::HostPort{"", uint16_t(port)});
    } catch (const Error& e) {
      last = e.what();  // taken (a job already uses it): the next one
    }
  }
  throw Error(fmt::format("{}: no free port in {}-{} ({})", flag, range.low, range.high, last));
}

}  // namespace shardlm::net
