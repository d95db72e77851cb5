// The authenticated opening of every TCP connection between ranks.
//
// Both ends send a HELLO at once, then a MAC, then check the other's:
//   HELLO (88 bytes, little-endian): magic "SHLMCOMM", u32 protocol version,
//     i32 rank, i32 world size, u32 listen port (0 if none),
//     SHA-256(cluster id) [32], random nonce [32]
//   MAC (32 bytes): HMAC-SHA256(token, "shardlm-comm" | role | my HELLO | peer HELLO)
// with role 'C' for the connecting side and 'A' for the accepting side, so a
// MAC cannot be reflected back. Both nonces are fresh, so a MAC cannot be
// replayed. A wrong magic, version, cluster id or MAC refuses the connection
// on both ends with a logged reason (each end checks independently).
// Both ends then hold a session key no one else can compute,
//   HMAC-SHA256(token, "shardlm-session" | connector's HELLO | acceptor's HELLO),
// which authenticates the frames that follow (frame_auth.h: the control
// connections', and a tcp rank link's between two hosts).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "net/socket.h"

namespace shardlm::net {

// 2: the session key, and frames tagged with it (cluster/protocol.h,
// comm/tcp/tcp_transport.h). 3: the tcp backend's address table tagged too
// (comm/tcp/tcp_connect.cpp).
constexpr uint32_t kProtocolVersion = 3;

enum class Role : char { Connector = 'C', Acceptor = 'A' };

using SessionKey = std::array<uint8_t, 32>;

struct HelloInfo {
  int rank = -1;
  int size = 0;
  uint16_t listen_port = 0;
  SessionKey session_key{};
};

struct HandshakeParams {
  HelloInfo self;
  std::string token;
  std::string cluster_id;
  uint32_t version = kProtocolVersion;  // only tests change it
};

// Runs the handshake on a connected non-blocking socket; returns the peer's
// HELLO and the session key. On refusal logs one line (spdlog) and throws Error naming `who`.
HelloInfo handshake(int fd, Role role, const HandshakeParams& params, Deadline deadline,
                    const std::string& who);

}  // namespace shardlm::net
