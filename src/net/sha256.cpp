#include "net/sha256.h"

#include <openssl/evp.h>

#include "core/error.h"

namespace shardlm::net {

Sha256Digest sha256(std::string_view data) {
  Sha256Digest d{};
  unsigned len = 0;
  if (EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr) != 1 || len != d.size())
    throw Error("SHA-256 failed (OpenSSL)");
  return d;
}

}  // namespace shardlm::net
