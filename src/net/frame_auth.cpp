#include "net/frame_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <memory>

#include "core/error.h"

namespace shardlm::net {
namespace {

FrameTag tag_of(const SessionKey& key, Role sender, uint64_t number,
                std::initializer_list<std::span<const uint8_t>> parts) {
  // Fetched once: EVP_MAC_fetch looks the algorithm up under a lock.
  static EVP_MAC* const gmac = EVP_MAC_fetch(nullptr, "GMAC", nullptr);
  if (!gmac) throw Error("GMAC is not available (OpenSSL)");
  const std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(gmac), EVP_MAC_CTX_free);
  // The nonce, unique under the connection's key: the sender's role and the frame's number.
  uint8_t nonce[12] = {uint8_t(sender)};
  for (int i = 0; i < 8; ++i) nonce[1 + i] = uint8_t(number >> (8 * i));
  char cipher[] = "AES-256-GCM";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, cipher, 0),
                               OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, nonce, sizeof nonce),
                               OSSL_PARAM_construct_end()};
  bool ok = ctx && EVP_MAC_init(ctx.get(), key.data(), key.size(), params) == 1;
  for (const auto& part : parts) ok = ok && EVP_MAC_update(ctx.get(), part.data(), part.size()) == 1;
  FrameTag tag{};
  size_t len = 0;
  if (!ok || EVP_MAC_final(ctx.get(), tag.data(), &len, tag.size()) != 1 || len != tag.size())
    throw Error("GMAC failed (OpenSSL)");
  return tag;
}

Role other(Role r) { return r == Role::Connector ? Role::Acceptor : Role::Connector; }

}  // namespace

FrameTag FrameAuth::seal(std::initializer_list<std::span<const uint8_t>> parts) {
  return tag_of(key_, self_, sent_++, parts);
}

bool FrameAuth::verify(std::initializer_list<std::span<const uint8_t>> parts, const FrameTag& tag) {
  const FrameTag expected = tag_of(key_, other(self_), received_++, parts);
  return CRYPTO_memcmp(expected.data(), tag.data(), tag.size()) == 0;
}

}  // namespace shardlm::net
