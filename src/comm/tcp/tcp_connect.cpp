// Rendezvous of the TCP backend: every rank authenticates to rank 0 (the
// coordinator) and tells it the port it listens on; rank 0 answers with
// everyone's address (on a tagged link the link's first tagged frame: an
// address changed on the way would send a rank to a host of someone's
// choosing, whose handshake would fail, but the failure would not name
// the culprit); then rank r connects to ranks 1..r-1 and accepts from
// ranks r+1..n-1, so every pair ends up with one authenticated socket.
// Connections that fail the handshake are logged and dropped; the wait goes
// on until the connect deadline, or until ConnectOptions::while_waiting throws.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "net/frame_auth.h"
#include "net/handshake.h"
#include "net/socket.h"
#include "comm/tcp/tcp.h"
#include "comm/tcp/tcp_transport.h"
#include "core/error.h"

namespace shardlm::comm {
namespace {

using namespace net;
using namespace tcp;

struct Address {
  std::string host;
  uint16_t port = 0;
};

std::string host_of(const std::string& ip_port) {
  if (!ip_port.empty() && ip_port[0] == '[') return ip_port.substr(1, ip_port.find(']') - 1);
  return ip_port.substr(0, ip_port.rfind(':'));
}

// Address table: u32 count, then per rank u16 port, u16 host length, host.
// On a tagged link the MAC of those bytes follows (the link's first frame,
// net/frame_auth.h): connect_tcp seals one per link, read_table checks it.
std::vector<uint8_t> encode_table(const std::vector<Address>& table) {
  std::vector<uint8_t> out(4);
  uint32_t n = uint32_t(table.size());
  std::memcpy(out.data(), &n, 4);
  for (auto& a : table) {
    uint16_t len = uint16_t(a.host.size());
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(&a.port),
               reinterpret_cast<const uint8_t*>(&a.port) + 2);
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(&len),
               reinterpret_cast<const uint8_t*>(&len) + 2);
    out.insert(out.end(), a.host.begin(), a.host.end());
  }
  return out;
}

std::vector<Address> read_table(int fd, int size, std::optional<FrameAuth>& auth, Deadline deadline,
                                const std::string& who) {
  std::vector<uint8_t> bytes;  // as sent, for the MAC
  const auto read = [&](void* to, size_t n) {
    read_all(fd, to, n, deadline, who);
    bytes.insert(bytes.end(), static_cast<const uint8_t*>(to), static_cast<const uint8_t*>(to) + n);
  };
  uint32_t n = 0;
  read(&n, 4);
  if (n != uint32_t(size))
    throw Error(fmt::format("{}: address table has {} entries, expected {}", who, n, size));
  std::vector<Address> table(n);
  for (auto& a : table) {
    uint16_t len = 0;
    read(&a.port, 2);
    read(&len, 2);
    if (len > 255) throw Error(fmt::format("{}: address table host of {} bytes", who, len));
    a.host.resize(len);
    read(a.host.data(), len);
  }
  if (auth) {
    FrameTag mac;
    read_all(fd, mac.data(), mac.size(), deadline, who);
    if (!auth->verify({bytes}, mac))
      throw Error(fmt::format("{}: the address table failed its integrity check: altered, or not from the peer "
                              "that authenticated", who));
  }
  return table;
}

// The caller's listening socket (ConnectOptions::listen_fd).
Fd adopt_listener(int fd) {
  Fd listener(fd);
  set_nonblocking(listener.get());
  return listener;
}

// An authenticated link to `peer`. Its frames carry MACs unless its two ends'
// addresses are the same (loopback: no network reaches it), which both ends
// see alike.
PeerLink link_of(Fd fd, std::string address, const HelloInfo& peer, Role role) {
  PeerLink link{std::move(fd), std::move(address), std::nullopt};
  if (!peer_on_this_host(link.fd.get())) link.auth.emplace(peer.session_key, role);
  return link;
}

constexpr std::chrono::milliseconds kCheckInterval{100};  // how often while_waiting is called

Deadline handshake_deadline(const ConnectOptions& o, Deadline overall) {
  // A silent or slow stranger must not hold up the rendezvous for long.
  auto limit = std::min<std::chrono::milliseconds>(o.timeouts.connect, std::chrono::seconds(5));
  return std::min(overall, SteadyClock::now() + limit);
}

// Accepts until `want(rank)` has been satisfied for `count` ranks.
template <class OnPeer>
void accept_peers(int listen_fd, int count, const ConnectOptions& o, const HandshakeParams& hp,
                  Deadline deadline, std::vector<PeerLink>& links, OnPeer on_peer) {
  int got = 0;
  while (got < count) {
    Fd c = accept_until(listen_fd, std::min(deadline, SteadyClock::now() + kCheckInterval));
    if (!c && SteadyClock::now() < deadline) {
      if (o.while_waiting) o.while_waiting();
      continue;
    }
    if (!c) {
      std::string missing;
      for (size_t r = 0; r < links.size(); ++r)
        if (int(r) != o.rank && !links[r].fd) missing += fmt::format(" {}", r);
      throw Error(fmt::format("tcp rendezvous: rank {} timed out after {} ms waiting for ranks{}",
                              o.rank, o.timeouts.connect.count(), missing));
    }
    std::string addr = peer_address(c.get());
    try {
      HelloInfo peer = handshake(c.get(), Role::Acceptor, hp, handshake_deadline(o, deadline),
                                 "connection from " + addr);
      if (peer.size != o.size || peer.rank <= o.rank || peer.rank >= o.size ||
          links[size_t(peer.rank)].fd)
        throw Error(fmt::format("connection from {} claims rank {} of {} (unexpected here)", addr,
                                peer.rank, peer.size));
      on_peer(peer, addr);
      links[size_t(peer.rank)] = link_of(std::move(c), addr, peer, Role::Acceptor);
      ++got;
    } catch (const Error& e) {
      spdlog::warn("comm: rank {} dropped a connection: {}", o.rank, e.what());
    }
  }
}

}  // namespace

std::unique_ptr<Transport> connect_tcp(const ConnectOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    throw Error(fmt::format("tcp: bad rank {} for world size {}", o.rank, o.size));
  std::vector<PeerLink> links(size_t(o.size));
  if (o.size == 1) return std::make_unique<TcpTransport>(0, 1, std::move(links), o.timeouts);
  if (o.token.empty()) throw Error("tcp: no token (set SHARDLM_TOKEN or pass a token file)");
  Deadline deadline = SteadyClock::now() + o.timeouts.connect;
  HandshakeParams hp{{o.rank, o.size, 0}, o.token, o.cluster_id, kProtocolVersion};

  if (o.rank == 0) {
    Fd listener = o.listen_fd >= 0 ? adopt_listener(o.listen_fd)
                                   : listen_on(parse_host_port(o.coordinator, "coordinator"));
    std::vector<Address> table(size_t(o.size));
    accept_peers(listener.get(), o.size - 1, o, hp, deadline, links,
                 [&](const HelloInfo& peer, const std::string& addr) {
                   table[size_t(peer.rank)] = {host_of(addr), peer.listen_port};
                 });
    const std::vector<uint8_t> bytes = encode_table(table);
    for (int r = 1; r < o.size; ++r) {
      PeerLink& link = links[size_t(r)];
      std::vector<uint8_t> frame = bytes;
      if (link.auth) {
        const FrameTag mac = link.auth->seal({bytes});
        frame.insert(frame.end(), mac.begin(), mac.end());
      }
      write_all(link.fd.get(), frame.data(), frame.size(), deadline, fmt::format("rank {} ({})", r, link.address));
    }
  } else {
    // The last rank takes no links (it connects to all the others): it opens no port.
    const bool accepts = o.rank < o.size - 1;
    Fd listener = o.listen_fd >= 0 ? adopt_listener(o.listen_fd) : accepts ? listen_on(HostPort{"", 0}) : Fd();
    hp.self.listen_port = listener ? local_port(listener.get()) : 0;
    HostPort coord = parse_host_port(o.coordinator, "coordinator");
    std::string who = fmt::format("rank 0 ({})", coord.str());
    Fd c = connect_to(coord, deadline);
    HelloInfo root = handshake(c.get(), Role::Connector, hp, deadline, who);
    if (root.rank != 0 || root.size != o.size)
      throw Error(fmt::format("{}: answered as rank {} of {}, expected rank 0 of {}", who,
                              root.rank, root.size, o.size));
    links[0] = link_of(std::move(c), coord.str(), root, Role::Connector);
    std::vector<Address> table = read_table(links[0].fd.get(), o.size, links[0].auth, deadline, who);
    for (int s = 1; s < o.rank; ++s) {
      HostPort hpv{table[size_t(s)].host, table[size_t(s)].port};
      std::string peer_who = fmt::format("rank {} ({})", s, hpv.str());
      Fd f = connect_to(hpv, deadline);
      HelloInfo peer = handshake(f.get(), Role::Connector, hp, deadline, peer_who);
      if (peer.rank != s)
        throw Error(fmt::format("{}: answered as rank {}", peer_who, peer.rank));
      links[size_t(s)] = link_of(std::move(f), hpv.str(), peer, Role::Connector);
    }
    if (accepts)
      accept_peers(listener.get(), o.size - 1 - o.rank, o, hp, deadline, links,
                   [](const HelloInfo&, const std::string&) {});
  }
  spdlog::debug("comm: tcp rank {} of {} connected", o.rank, o.size);
  return std::make_unique<TcpTransport>(o.rank, o.size, std::move(links), o.timeouts);
}

}  // namespace shardlm::comm
