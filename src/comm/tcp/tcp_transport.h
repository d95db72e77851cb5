// The TCP backend's links: one non-blocking socket per peer carrying framed
// messages, driven by poll(2) from test()/wait_all() (no thread of its own).
//
// Frame = 24-byte header + pad + payload [+ 16-byte MAC]:
//   u32 magic "SLMF", u8 type (1 data, 2 abort, 3 bye), u8 pad_words, u8[2] zero, u64 tag,
//   u64 length; then 8 * pad_words zero bytes the receiver skips; on a link
//   between two hosts the MAC (net/frame_auth.h) over the header and the
//   payload, keyed by the link's handshake, so a frame altered, replayed or
//   injected on the way fails the transport naming the peer. A link within
//   one host (its two ends' addresses the same: loopback) carries none: no
//   network reaches it, and on loopback the MACs cost a 1B model's tp 2
//   decode ~5 % (docs/BENCHMARKS.md). A sender tags a frame when its first
//   byte goes out, so the frames' numbers follow the wire's order. A
//   receiver adds the bytes to the MAC as they arrive (a combining receive
//   sums them before the MAC is checked: a frame that fails it fails the
//   transport, and with it every receive, so no sum of a forged frame is
//   ever handed out).
// A large payload goes out behind a header padded to kPaddedBytes: right
// behind the bare 24 bytes, a 2-rank exchange of 256 KiB-4 MiB over loopback
// took ~1.5x as long as with no header, the same in a raw socket exchange
// (docs/bench/comm6.md; the kernel's copies, not ours; 512 bytes in front of
// the payload cost nothing measurable). Why the 24 bytes cost is not known.
// A data frame is matched to the oldest posted irecv of its (peer, tag) and
// read into that buffer (small frames, and the start of any frame, through a
// per-peer stage, so one recv(2) takes header and payload together; a
// combining receive, irecv_reduce, is summed out of the stage as the bytes
// arrive and never read into directly); if none
// is posted yet it is buffered, up to
// max_unexpected_bytes in all, after which that peer is not read until a
// matching irecv is posted (back-pressure). An abort frame carries a short
// reason and fails this transport too. A bye frame (sent by the destructor)
// makes the peer's later EOF a clean close rather than a failure, so a rank
// may finish and exit before the others. Anything else closes the connection
// with an error naming the peer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/inbox.h"
#include "net/frame_auth.h"
#include "net/socket.h"
#include "comm/transport.h"
#include "comm/wait_policy.h"

namespace shardlm::comm::tcp {

struct FrameHeader {
  static constexpr uint32_t kMagic = 0x464d4c53;  // "SLMF" little-endian
  static constexpr uint8_t kData = 1, kAbort = 2, kBye = 3;
  static constexpr size_t kBytes = 24;
  static constexpr size_t kMaxAbortReason = 1024;
  uint32_t magic = kMagic;
  uint8_t type = kData;
  uint8_t pad_words = 0;
  uint8_t zero[2] = {0, 0};
  uint64_t tag = 0;
  uint64_t length = 0;

  static constexpr size_t kPadFromBytes = size_t(256) << 10;  // payloads this long get padded
  static constexpr size_t kPaddedBytes = 512;                  // header + pad
  static constexpr size_t kMaxPadBytes = 8 * 255;
  size_t pad_bytes() const { return 8 * size_t(pad_words); }
};
static_assert(sizeof(FrameHeader) == FrameHeader::kBytes);
static_assert((FrameHeader::kPaddedBytes - FrameHeader::kBytes) % 8 == 0 &&
              FrameHeader::kPaddedBytes - FrameHeader::kBytes <= FrameHeader::kMaxPadBytes);

struct TcpLimits {
  size_t max_frame_bytes = size_t(1) << 32;      // any single message
  size_t max_unexpected_bytes = size_t(256) << 20;  // buffered before irecv
};

struct PeerLink {
  net::Fd fd;                // connected, authenticated, non-blocking
  std::string address;  // "ip:port" for messages
  // A tagged link's MACs, numbered from the frames the rendezvous sent on it
  // already; none: its frames carry no MACs (both ends must agree:
  // connect_tcp's rule).
  std::optional<net::FrameAuth> auth;
};

class TcpTransport final : public Transport {
 public:
  // links[r] for every r != rank (links[rank] is empty).
  TcpTransport(int rank, int size, std::vector<PeerLink> links, Timeouts timeouts,
               TcpLimits limits = {});
  ~TcpTransport() override;

  std::string_view backend() const override { return "tcp"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe_peer(int peer) const override;
  bool shares_host(int peer) const override;

  RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int peer, uint64_t tag, void* data, size_t capacity) override;
  // Sums straight out of the receive stage (see read_ready).
  RequestPtr irecv_reduce(int peer, uint64_t tag, void* acc, size_t count, DType dtype, ReduceOp op,
                          bool message_first) override;
  bool test(const RequestPtr& r) override;
  void wait_all(std::span<const RequestPtr> requests, Deadline deadline) override;
  void abort(const std::string& reason) noexcept override;

 private:
  struct SendReq;
  struct Peer;

  void check_peer(int peer) const;
  void check_failed() const;
  RequestPtr post_recv(int peer, uint64_t tag, void* data, size_t capacity, const Combine* combine);
  // One poll(2) over all links with this timeout, then reads/writes what is ready.
  void progress(int timeout_ms);
  // Without poll(2): flushes sends, reads the peers `requests` wait for.
  void progress_pending(std::span<const RequestPtr> requests);
  void flush_sends(Peer& p);
  void read_ready(Peer& p);
  static void reserve_stage(Peer& p, size_t bytes);
  bool take_staged(Peer& p);   // true when a frame for a receive completed
  bool payload_done(Peer& p);  // the same, once the payload and its MAC are all there
  // n more bytes of the header (and its pad) are in: checks the header once
  // its fixed part is, dispatches it once the pad is too.
  void header_arrived(Peer& p, size_t n);
  void dispatch_header(Peer& p);
  void finish_frame(Peer& p);
  void route_payload(Peer& p);
  void close_links(const std::string& reason) noexcept;
  [[noreturn]] void fail(const std::string& message);

  int rank_;
  int size_;
  Timeouts timeouts_;
  TcpLimits limits_;
  WaitRule wait_rule_;
  size_t unexpected_bytes_ = 0;  // buffered before their irecv, all peers
  std::vector<std::unique_ptr<Peer>> peers_;
  std::string failure_;  // non-empty once failed
  std::vector<net::Fd> closed_;  // half-closed links of a failed transport
};

}  // namespace shardlm::comm::tcp
