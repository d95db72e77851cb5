#include "net/frame_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "core/error.h"

namespace shardlm::net {
namespace {

char kCipher[] = "AES-256-GCM";

// The nonce, unique under the connection's key: the sender's role and the frame's number.
std::array<uint8_t, 12> nonce_of(Role sender, uint64_t number) {
  std::array<uint8_t, 12> nonce{uint8_t(sender)};
  for (int i = 0; i < 8; ++i) nonce[size_t(1 + i)] = uint8_t(number >> (8 * i));
  return nonce;
}

Role other(Role r) { return r == Role::Connector ? Role::Acceptor : Role::Connector; }

}  // namespace

void FrameMac::CtxFree::operator()(evp_mac_ctx_st* ctx) const { EVP_MAC_CTX_free(ctx); }

FrameMac::FrameMac(const SessionKey& key, Role sender) : sender_(sender) {
  // Fetched once: EVP_MAC_fetch looks the algorithm up under a lock.
  static EVP_MAC* const gmac = EVP_MAC_fetch(nullptr, "GMAC", nullptr);
  if (!gmac) throw Error("GMAC is not available (OpenSSL)");
  ctx_.reset(EVP_MAC_CTX_new(gmac));
  std::array<uint8_t, 12> nonce = nonce_of(sender, 0);
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, kCipher, 0),
                               OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, nonce.data(), nonce.size()),
                               OSSL_PARAM_construct_end()};
  if (!ctx_ || EVP_MAC_init(ctx_.get(), key.data(), key.size(), params) != 1)
    throw Error("GMAC setup failed (OpenSSL)");
}

FrameMac::~FrameMac() = default;
FrameMac::FrameMac(FrameMac&&) noexcept = default;
FrameMac& FrameMac::operator=(FrameMac&&) noexcept = default;

void FrameMac::begin(uint64_t number) {
  std::array<uint8_t, 12> nonce = nonce_of(sender_, number);
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, nonce.data(), nonce.size()),
                               OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(ctx_.get(), nullptr, 0, params) != 1) throw Error("GMAC failed (OpenSSL)");
}

void FrameMac::add(std::span<const uint8_t> bytes) {
  if (!bytes.empty() && EVP_MAC_update(ctx_.get(), bytes.data(), bytes.size()) != 1)
    throw Error("GMAC failed (OpenSSL)");
}

FrameTag FrameMac::tag() {
  FrameTag tag{};
  size_t len = 0;
  if (EVP_MAC_final(ctx_.get(), tag.data(), &len, tag.size()) != 1 || len != tag.size())
    throw Error("GMAC failed (OpenSSL)");
  return tag;
}

FrameAuth::FrameAuth(const SessionKey& key, Role self, uint64_t sent, uint64_t received)
    : key_(key), sent_(sent), received_(received), outgoing_(key, self), incoming_(key, other(self)) {}

FrameTag FrameAuth::seal(std::initializer_list<std::span<const uint8_t>> parts) {
  outgoing_.begin(sent_++);
  for (const auto& part : parts) outgoing_.add(part);
  return outgoing_.tag();
}

bool FrameAuth::verify(std::initializer_list<std::span<const uint8_t>> parts, const FrameTag& tag) {
  begin_incoming();
  for (const auto& part : parts) add_incoming(part);
  return incoming_matches(tag);
}

void FrameAuth::begin_incoming() { incoming_.begin(received_++); }

bool FrameAuth::incoming_matches(const FrameTag& tag) {
  const FrameTag expected = incoming_.tag();
  return CRYPTO_memcmp(expected.data(), tag.data(), tag.size()) == 0;
}

}  // namespace shardlm::net
