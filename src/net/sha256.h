// SHA-256 of a byte string (OpenSSL): the handshake's cluster-id digest and
// the shm backend's segment name both come from it.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace shardlm::net {

using Sha256Digest = std::array<uint8_t, 32>;

// Throws Error when OpenSSL cannot compute it.
Sha256Digest sha256(std::string_view data);

}  // namespace shardlm::net
