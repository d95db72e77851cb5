// Integrity of the frames a connection carries after its handshake: each
// frame ends in a 16-byte tag, the GMAC (AES-256-GCM's authentication alone)
// of the frame's bytes under the session key the handshake agreed from the
// token and both fresh nonces (handshake.h), with the sender's role and the
// frame's number as its nonce. A frame altered on the way fails its check at
// the receiver, and so does one dropped, replayed or reordered (its number is
// not the next one expected), reflected back to its sender (the role), or
// taken from another connection (the key). What the frames say is not hidden:
// only that no one but the token's holders wrote them. GMAC rather than
// HMAC-SHA256 because gigabytes of weights cross these connections: 6.7-7.1
// GB/s against 1.5 on the Zen 3 of docs/BENCHMARKS.md's Cluster section.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>

#include "net/handshake.h"

struct evp_mac_ctx_st;

namespace shardlm::net {

using FrameTag = std::array<uint8_t, 16>;

// The bytes of a header struct, for seal() and verify().
template <class T>
std::span<const uint8_t> bytes_of(const T& v) {
  return {reinterpret_cast<const uint8_t*>(&v), sizeof v};
}

// The tags of one direction's frames, one at a time: begin(number), add()
// its bytes as they come, then tag(). The key is set up once; each frame
// only sets its nonce (0.75 us a frame against 2.8 for a fresh context).
class FrameMac {
 public:
  FrameMac(const SessionKey& key, Role sender);
  ~FrameMac();
  FrameMac(FrameMac&&) noexcept;
  FrameMac& operator=(FrameMac&&) noexcept;

  void begin(uint64_t number);
  void add(std::span<const uint8_t> bytes);
  FrameTag tag();

 private:
  struct CtxFree {
    void operator()(evp_mac_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_mac_ctx_st, CtxFree> ctx_;
  Role sender_;
};

// Both directions of a connection, numbered from where it stands. Not
// thread-safe: its owner serializes the sends and the receives.
class FrameAuth {
 public:
  // `sent`, `received`: frames already on the connection, for a process that
  // takes it over (the worker's job process).
  FrameAuth(const SessionKey& key, Role self, uint64_t sent = 0, uint64_t received = 0);

  // The tag of the next frame this end sends, over its parts in order.
  FrameTag seal(std::initializer_list<std::span<const uint8_t>> parts);
  // The frame sealed last will never be sent (a sender giving up puts its
  // last words in its place): its number goes to the next.
  void unseal_last() { --sent_; }
  // Whether `tag` is that of the next frame from the peer, over its parts.
  // Either way the frame's number is used up: a connection whose check
  // failed must be closed.
  bool verify(std::initializer_list<std::span<const uint8_t>> parts, const FrameTag& tag);
  // The same for a frame whose bytes arrive piecemeal: begin_incoming(),
  // add_incoming() each piece, then incoming_matches(its tag).
  void begin_incoming();
  void add_incoming(std::span<const uint8_t> bytes) { incoming_.add(bytes); }
  bool incoming_matches(const FrameTag& tag);

  const SessionKey& key() const { return key_; }
  uint64_t sent() const { return sent_; }
  // Counting one that failed its check: its number, for naming it.
  uint64_t received() const { return received_; }

 private:
  SessionKey key_;
  uint64_t sent_, received_;
  FrameMac outgoing_, incoming_;
};

}  // namespace shardlm::net
