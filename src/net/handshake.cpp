#include "net/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "net/sha256.h"
#include "net/socket.h"

namespace shardlm::net {
namespace {

constexpr char kMagic[8] = {'S', 'H', 'L', 'M', 'C', 'O', 'M', 'M'};
constexpr size_t kHelloBytes = 88;
using Hello = std::array<uint8_t, kHelloBytes>;
using Digest = std::array<uint8_t, 32>;

template <class T>
void put(uint8_t* at, T v) {
  std::memcpy(at, &v, sizeof v);
}
template <class T>
T get(const uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

Digest hmac_of(const std::string& token, std::string msg, const Hello& first, const Hello& second) {
  msg.append(reinterpret_cast<const char*>(first.data()), first.size());
  msg.append(reinterpret_cast<const char*>(second.data()), second.size());
  Digest d{};
  unsigned len = 0;
  if (!HMAC(EVP_sha256(), token.data(), int(token.size()),
            reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), d.data(), &len))
    throw Error("HMAC-SHA256 failed");
  return d;
}

Digest mac(const std::string& token, Role role, const Hello& first, const Hello& second) {
  return hmac_of(token, std::string("shardlm-comm") + char(role), first, second);
}

[[noreturn]] void refuse(const std::string& who, const std::string& why) {
  spdlog::error("comm: refused connection with {}: {}", who, why);
  throw Error(fmt::format("{}: connection refused: {}", who, why));
}

}  // namespace

HelloInfo handshake(int fd, Role role, const HandshakeParams& params, Deadline deadline,
                    const std::string& who) {
  Hello mine{};
  std::memcpy(mine.data(), kMagic, 8);
  put<uint32_t>(&mine[8], params.version);
  put<int32_t>(&mine[12], params.self.rank);
  put<int32_t>(&mine[16], params.self.size);
  put<uint32_t>(&mine[20], params.self.listen_port);
  Digest cluster = sha256(params.cluster_id);
  std::memcpy(&mine[24], cluster.data(), 32);
  if (RAND_bytes(&mine[56], 32) != 1) throw Error("RAND_bytes failed");
  write_all(fd, mine.data(), mine.size(), deadline, who);

  Hello theirs{};
  read_all(fd, theirs.data(), 8, deadline, who);
  if (std::memcmp(theirs.data(), kMagic, 8) != 0) refuse(who, "not a shardlm peer (bad magic)");
  read_all(fd, theirs.data() + 8, kHelloBytes - 8, deadline, who);
  uint32_t version = get<uint32_t>(&theirs[8]);
  if (version != params.version)
    refuse(who, fmt::format("protocol version {} but this build speaks {}", version,
                            params.version));
  if (std::memcmp(&theirs[24], cluster.data(), 32) != 0)
    refuse(who, fmt::format("different cluster id (ours: '{}')", params.cluster_id));

  Digest my_mac = mac(params.token, role, mine, theirs);
  write_all(fd, my_mac.data(), my_mac.size(), deadline, who);
  Digest their_mac{};
  read_all(fd, their_mac.data(), their_mac.size(), deadline, who);
  Role their_role = role == Role::Connector ? Role::Acceptor : Role::Connector;
  Digest expected = mac(params.token, their_role, theirs, mine);
  if (CRYPTO_memcmp(expected.data(), their_mac.data(), expected.size()) != 0)
    refuse(who, "authentication failed (wrong token?)");

  HelloInfo info;
  info.rank = get<int32_t>(&theirs[12]);
  info.size = get<int32_t>(&theirs[16]);
  uint32_t port = get<uint32_t>(&theirs[20]);
  if (port > 65535) refuse(who, fmt::format("bad listen port {}", port));
  info.listen_port = uint16_t(port);
  const bool connector = role == Role::Connector;
  info.session_key = hmac_of(params.token, "shardlm-session", connector ? mine : theirs, connector ? theirs : mine);
  return info;
}

}  // namespace shardlm::net
