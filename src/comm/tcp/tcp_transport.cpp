#include "comm/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"

namespace shardlm::comm::tcp {

struct TcpTransport::SendReq : Request {
  SendReq(int peer, uint64_t tag, const void* d, size_t n)
      : Request(peer, tag, true), data(static_cast<const uint8_t*>(d)), bytes(n) {
    header.tag = tag;
    header.length = n;
    if (n >= FrameHeader::kPadFromBytes)
      header.pad_words = uint8_t((FrameHeader::kPaddedBytes - FrameHeader::kBytes) / 8);
  }
  FrameHeader header;
  const uint8_t* data;
  size_t bytes;
  size_t sent = 0;  // of header + pad + payload + MAC
  bool sealed = false;  // `mac` is this frame's
  net::FrameTag mac;
};

constexpr size_t kMacBytes = sizeof(net::FrameTag);

using net::bytes_of;

// The pad behind a padded header.
const uint8_t kZeroPad[FrameHeader::kMaxPadBytes] = {};

// A long payload's rest straight into its buffer, and the MAC behind it (if
// the link has MACs) in the same recvmsg(2) when it is there.
ssize_t recv_payload_and_mac(int fd, uint8_t* payload, size_t left, uint8_t* mac, size_t mac_bytes) {
  iovec iov[2] = {{payload, left}, {mac, mac_bytes}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = mac_bytes ? 2 : 1;
  return ::recvmsg(fd, &msg, 0);
}

// Reads that start a frame, and payload remainders shorter than this, go
// through a per-peer stage: one recv(2) then takes a header with its payload
// (and whatever follows) instead of one for each, a syscall saved per
// small message. Longer remainders go straight to their buffer. After a
// long frame the next header is read alone unless a combining receive waits
// for it (below): a long payload takes a recv(2) of its own anyway, and
// staging its first 32 KiB would cost a copy.
constexpr size_t kStageBytes = (size_t(32) << 10) + FrameHeader::kBytes;
// A combining receive is always read through the stage, so there a larger
// read costs no copy and saves recv(2) calls: up to this much per call, a
// padded header with 512 KiB of payload (loopback TCP has a 2-rank
// exchange's whole message queued by the time the receiver reads). A header
// is read that way too while the oldest posted receive from the peer
// combines (the frame is most likely its), and otherwise alone after a long
// frame: staging a plain frame's payload would cost a copy. Reads of 128 KiB
// made a 256 KiB exchange 1.2x and a 512 KiB one 1.1x as slow
// (docs/bench/comm8.md). The stage grows to this size only for a peer that
// has had a long combining receive.
constexpr size_t kCombineReadBytes = (size_t(512) << 10) + FrameHeader::kPaddedBytes;

struct TcpTransport::Peer {
  enum class Read { Header, Payload, Mac, Stalled };
  Peer(int r, std::string d, size_t& buffered, size_t budget)
      : rank(r), desc(std::move(d)), inbox(desc, buffered, budget) {}
  int rank = -1;
  net::Fd fd;
  std::string desc;
  bool bye = false;  // peer said goodbye: its EOF is clean
  bool on_this_host = false;
  std::deque<std::shared_ptr<SendReq>> sendq;
  Inbox inbox;
  Read read = Read::Header;
  uint8_t header_bytes[FrameHeader::kBytes];
  size_t header_got = 0;  // of the header and its pad (not kept)
  // The header's length with its pad, once its first kBytes are in.
  size_t header_length() const {
    return header_got < FrameHeader::kBytes ? FrameHeader::kBytes
                                            : FrameHeader::kBytes + 8 * size_t(header_bytes[offsetof(FrameHeader, pad_words)]);
  }
  // The last frame's payload was at least kStageBytes (see kCombineReadBytes).
  bool after_long = false;
  FrameHeader frame;
  uint8_t* target = nullptr;  // where the payload being read goes
  size_t target_got = 0;
  Inbox::Delivery delivery;  // of a data frame
  std::string control;  // payload of an abort frame
  std::unique_ptr<uint8_t[]> stage;  // read from the socket, not yet taken
  size_t stage_capacity = 0;
  size_t staged_at = 0, staged_end = 0;
  // Bytes at the stage's start short of a whole element of a combining
  // receive: the next recv(2) appends to them.
  size_t stage_kept = 0;
  bool has_staged() const { return staged_at < staged_end; }
  std::optional<net::FrameAuth> auth;  // a tagged link's
  net::FrameTag mac;  // the frame's, as read
  size_t mac_got = 0;
  size_t mac_bytes() const { return auth ? kMacBytes : 0; }
  // A last frame (abort, bye) with `text`, without waiting: only between
  // frames (mid-frame the close says enough). Where the frame at the send
  // queue's front was tagged but none of it went out, this one takes its
  // place and its number. Without a MAC (OpenSSL failed) none is sent.
  void send_last_words(FrameHeader h, std::string_view text) noexcept {
    if (!fd || !(sendq.empty() || sendq.front()->sent == 0)) return;
    h.length = text.size();
    net::FrameTag mac{};
    try {
      if (auth) {
        if (!sendq.empty() && sendq.front()->sealed) {
          auth->unseal_last();
          sendq.front()->sealed = false;
        }
        mac = auth->seal({bytes_of(h), {reinterpret_cast<const uint8_t*>(text.data()), text.size()}});
      }
    } catch (const Error&) {
      return;
    }
    iovec iov[3] = {{&h, sizeof h}, {const_cast<char*>(text.data()), text.size()}, {mac.data(), mac_bytes()}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 3;
    ::sendmsg(fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
};

TcpTransport::TcpTransport(int rank, int size, std::vector<PeerLink> links, Timeouts timeouts,
                           TcpLimits limits)
    : rank_(rank), size_(size), timeouts_(timeouts), limits_(limits) {
  if (int(links.size()) != size) throw Error("tcp: need one link slot per rank");
  peers_.resize(size_t(size));
  int ranks_on_host = 1;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    auto p = std::make_unique<Peer>(r, fmt::format("rank {} ({})", r, links[size_t(r)].address),
                                    unexpected_bytes_, limits_.max_unexpected_bytes);
    p->auth = std::move(links[size_t(r)].auth);
    p->on_this_host = links[size_t(r)].fd && net::peer_on_this_host(links[size_t(r)].fd.get());
    ranks_on_host += p->on_this_host;
    p->fd = std::move(links[size_t(r)].fd);
    peers_[size_t(r)] = std::move(p);
  }
  wait_rule_ = WaitRule(ranks_on_host, timeouts_.spin);
}

TcpTransport::~TcpTransport() {
  if (failure_.empty()) {
    // Tell peers we leave cleanly; unsent frames would be lost anyway.
    FrameHeader bye;
    bye.type = FrameHeader::kBye;
    for (auto& p : peers_)
      if (p) p->send_last_words(bye, {});
  }
}

std::string TcpTransport::describe_peer(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) return fmt::format("rank {}", peer);
  return peers_[size_t(peer)]->desc;
}

bool TcpTransport::shares_host(int peer) const {
  return peer >= 0 && peer < size_ && peer != rank_ && peers_[size_t(peer)]->on_this_host;
}

void TcpTransport::check_peer(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw Error(fmt::format("tcp: bad peer rank {} (world size {}, self {})", peer, size_, rank_));
}

void TcpTransport::check_failed() const {
  if (!failure_.empty()) throw Error(failure_);
}

void TcpTransport::fail(const std::string& message) {
  if (failure_.empty()) {
    failure_ = message;
    close_links(message);
  }
  throw Error(failure_);
}

void TcpTransport::abort(const std::string& reason) noexcept {
  if (!failure_.empty()) return;
  failure_ = reason;
  close_links(reason);
}

void TcpTransport::close_links(const std::string& reason) noexcept {
  std::string text = reason.substr(0, FrameHeader::kMaxAbortReason);
  FrameHeader h;
  h.type = FrameHeader::kAbort;
  for (auto& p : peers_) {
    if (!p || !p->fd) continue;
    p->send_last_words(h, text);
    // Half-close and keep the socket until destruction: closing with unread
    // data would send a reset that can overtake the abort frame.
    ::shutdown(p->fd.get(), SHUT_WR);
    closed_.push_back(std::move(p->fd));
  }
}

RequestPtr TcpTransport::isend(int peer, uint64_t tag, const void* data, size_t bytes) {
  check_failed();
  check_peer(peer);
  Peer& p = *peers_[size_t(peer)];
  if (bytes > limits_.max_frame_bytes)
    throw Error(fmt::format("tcp: message of {} bytes to {} exceeds the {} byte frame limit",
                            bytes, p.desc, limits_.max_frame_bytes));
  if (!p.fd) fail(fmt::format("{}: cannot send, the peer has shut down", p.desc));
  auto req = std::make_shared<SendReq>(peer, tag, data, bytes);
  p.sendq.push_back(req);
  if (p.sendq.size() == 1) flush_sends(p);
  return req;
}

RequestPtr TcpTransport::irecv(int peer, uint64_t tag, void* data, size_t capacity) {
  return post_recv(peer, tag, data, capacity, nullptr);
}

RequestPtr TcpTransport::irecv_reduce(int peer, uint64_t tag, void* acc, size_t count, DType dtype,
                                      ReduceOp op, bool message_first) {
  const Combine combine{dtype, op, message_first};
  return post_recv(peer, tag, acc, count * combine.elem_bytes(), &combine);
}

RequestPtr TcpTransport::post_recv(int peer, uint64_t tag, void* data, size_t capacity,
                                   const Combine* combine) {
  check_failed();
  check_peer(peer);
  Peer& p = *peers_[size_t(peer)];
  RequestPtr req;
  try {
    req = p.inbox.post(peer, tag, data, capacity, combine);
  } catch (const Error& e) {
    fail(e.what());
  }
  if (req->done()) return req;
  if (!p.fd) fail(fmt::format("{}: cannot receive, the peer has shut down", p.desc));
  if (p.read == Peer::Read::Stalled) route_payload(p);
  return req;
}

void TcpTransport::flush_sends(Peer& p) {
  while (!p.sendq.empty() && p.fd) {
    SendReq& s = *p.sendq.front();
    const size_t head = FrameHeader::kBytes, pad = s.header.pad_bytes(), mac_at = head + pad + s.bytes;
    if (p.auth && !s.sealed) {
      s.mac = p.auth->seal({bytes_of(s.header), {s.data, s.bytes}});
      s.sealed = true;
    }
    iovec iov[4];
    int n = 0;
    if (s.sent < head) iov[n++] = {reinterpret_cast<uint8_t*>(&s.header) + s.sent, head - s.sent};
    if (s.sent < head + pad) {
      const size_t pad_sent = s.sent > head ? s.sent - head : 0;
      iov[n++] = {const_cast<uint8_t*>(kZeroPad) + pad_sent, pad - pad_sent};
    }
    size_t body_sent = s.sent > head + pad ? s.sent - head - pad : 0;
    if (body_sent < s.bytes) iov[n++] = {const_cast<uint8_t*>(s.data) + body_sent, s.bytes - body_sent};
    const size_t mac_sent = s.sent > mac_at ? s.sent - mac_at : 0;
    if (mac_sent < p.mac_bytes()) iov[n++] = {s.mac.data() + mac_sent, p.mac_bytes() - mac_sent};
    ssize_t w = 0;
    if (n > 0) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = size_t(n);
      w = ::sendmsg(p.fd.get(), &msg, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        fail(fmt::format("{}: send failed: {}", p.desc, net::errno_text(errno)));
      }
    }
    s.sent += size_t(w);
    if (s.sent == mac_at + p.mac_bytes()) {
      s.finish(s.bytes);
      p.sendq.pop_front();
    }
  }
}

void TcpTransport::route_payload(Peer& p) {
  try {
    p.delivery = p.inbox.arrive(p.frame.tag, p.frame.length);
  } catch (const Error& e) {
    fail(e.what());
  }
  if (!p.delivery) {
    p.read = Peer::Read::Stalled;  // back-pressure until an irecv or buffer space appears
    return;
  }
  p.target = reinterpret_cast<uint8_t*>(p.delivery.data());
  p.read = Peer::Read::Payload;
  p.target_got = 0;
  p.after_long = p.frame.length >= kStageBytes;
  if (p.frame.length == 0) payload_done(p);
}

void TcpTransport::header_arrived(Peer& p, size_t n) {
  const bool fixed_part_was_in = p.header_got >= FrameHeader::kBytes;
  p.header_got += n;
  if (!fixed_part_was_in && p.header_got >= FrameHeader::kBytes) {
    // Checked before its pad is waited for: garbage fails at once.
    FrameHeader& f = p.frame;
    std::memcpy(&f, p.header_bytes, sizeof f);
    bool zero_ok = f.zero[0] == 0 && f.zero[1] == 0;
    if (f.magic != FrameHeader::kMagic || !zero_ok ||
        (f.type != FrameHeader::kData && f.type != FrameHeader::kAbort &&
         f.type != FrameHeader::kBye))
      fail(fmt::format("{}: received a malformed frame header (garbage on the connection)", p.desc));
  }
  if (p.header_got == p.header_length()) dispatch_header(p);
}

void TcpTransport::dispatch_header(Peer& p) {
  const FrameHeader& f = p.frame;
  if (p.auth) {
    p.auth->begin_incoming();
    p.auth->add_incoming(bytes_of(f));
  }
  if (f.type == FrameHeader::kData) {
    if (f.length > limits_.max_frame_bytes)
      fail(fmt::format("{}: frame of {} bytes exceeds the {} byte limit", p.desc, f.length,
                       limits_.max_frame_bytes));
    route_payload(p);
    return;
  }
  if (f.length > FrameHeader::kMaxAbortReason)
    fail(fmt::format("{}: control frame of {} bytes is too long", p.desc, f.length));
  p.control.assign(f.length, '\0');
  p.target = reinterpret_cast<uint8_t*>(p.control.data());
  p.target_got = 0;
  p.read = Peer::Read::Payload;
  if (f.length == 0) payload_done(p);
}

void TcpTransport::finish_frame(Peer& p) {
  const FrameHeader& f = p.frame;
  p.read = Peer::Read::Header;
  p.header_got = 0;
  if (f.type == FrameHeader::kAbort)
    fail(fmt::format("{} aborted: {}", p.desc, p.control));
  if (f.type == FrameHeader::kBye) {
    p.bye = true;
    return;
  }
  if (p.delivery) p.inbox.complete(p.delivery);
}

bool TcpTransport::payload_done(Peer& p) {
  if (p.target_got < p.frame.length) return false;
  if (p.mac_got < p.mac_bytes()) {
    p.read = Peer::Read::Mac;
    return false;
  }
  p.mac_got = 0;
  if (p.auth && !p.auth->incoming_matches(p.mac))
    fail(fmt::format("{}: frame {} failed its integrity check (altered, replayed or not from the rank that "
                     "authenticated)",
                     p.desc, p.auth->received()));
  const bool for_a_receive = bool(p.delivery.target);
  finish_frame(p);
  return for_a_receive;
}

bool TcpTransport::take_staged(Peer& p) {
  const uint8_t* src = p.stage.get() + p.staged_at;
  const size_t avail = p.staged_end - p.staged_at;
  if (p.read == Peer::Read::Header) {
    const size_t n = std::min(avail, p.header_length() - p.header_got);
    if (p.header_got < FrameHeader::kBytes) std::memcpy(p.header_bytes + p.header_got, src, n);
    p.staged_at += n;
    header_arrived(p, n);
    return false;
  }
  if (p.read == Peer::Read::Mac) {
    const size_t n = std::min(avail, p.mac_bytes() - p.mac_got);
    std::memcpy(p.mac.data() + p.mac_got, src, n);
    p.mac_got += n;
    p.staged_at += n;
    return payload_done(p);
  }
  size_t n = std::min(avail, p.frame.length - p.target_got);
  if (const Combine* c = p.delivery.combine()) {
    // The sum takes whole elements from an aligned address (frames of
    // other lengths ahead in the stage can shift it); the rest of an element
    // waits at the stage's start for the next read.
    const size_t elem = c->elem_bytes();
    n -= n % elem;
    if (n == 0 || reinterpret_cast<uintptr_t>(src) % elem != 0) {
      std::memmove(p.stage.get(), src, avail);
      src = p.stage.get();
      p.staged_at = 0;
      p.staged_end = avail;
      if (n == 0) {
        p.stage_kept = avail;
        p.staged_end = 0;
        return false;
      }
    }
    if (p.auth) p.auth->add_incoming({src, n});
    c->apply(p.target + p.target_got, src, n);
  } else {
    if (p.auth) p.auth->add_incoming({src, n});
    std::memcpy(p.target + p.target_got, src, n);
  }
  p.target_got += n;
  p.staged_at += n;
  return payload_done(p);
}

// The stage holds `bytes` from here on; the bytes kept at its start move along.
void TcpTransport::reserve_stage(Peer& p, size_t bytes) {
  if (p.stage_capacity >= bytes) return;
  const size_t capacity = std::max(bytes, kStageBytes);
  std::unique_ptr<uint8_t[]> grown(new uint8_t[capacity]);
  if (p.stage_kept) std::memcpy(grown.get(), p.stage.get(), p.stage_kept);
  p.stage = std::move(grown);
  p.stage_capacity = capacity;
}

void TcpTransport::read_ready(Peer& p) {
  while (p.fd && p.read != Peer::Read::Stalled) {
    // A finished receive returns at once: the waiter looks at its requests
    // before anything else is read (the next frame is rarely there yet).
    if (p.has_staged()) {
      if (take_staged(p)) return;
      continue;
    }
    if (p.read == Peer::Read::Mac) {
      const ssize_t r = ::recv(p.fd.get(), p.mac.data() + p.mac_got, p.mac_bytes() - p.mac_got, 0);
      if (r > 0) {
        p.mac_got += size_t(r);
        if (payload_done(p)) return;
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) fail(fmt::format("{}: connection closed mid-frame (before its MAC)", p.desc));
      fail(fmt::format("{}: receive failed: {}", p.desc, net::errno_text(errno)));
    }
    const bool header = p.read == Peer::Read::Header;
    const size_t left = header ? 0 : p.frame.length - p.target_got;
    // (The pad of a padded header comes through the stage.)
    const bool combining = header ? p.inbox.oldest_posted_combines() : bool(p.delivery.combine());
    const bool header_alone = header && !combining && p.after_long && p.header_got < FrameHeader::kBytes;
    const bool direct = left >= kStageBytes && !combining;
    size_t stage_read = 0;  // bytes asked for at the stage's end
    if (!direct && !header_alone) {
      // A combining read of a payload stops after the next header: staging
      // more of a frame that is not combined would cost a copy.
      stage_read = !combining || (header && !p.after_long) ? kStageBytes
                   : header ? kCombineReadBytes
                            : std::min(kCombineReadBytes, std::max(kStageBytes, left + FrameHeader::kBytes));
      reserve_stage(p, p.stage_kept + stage_read);
    }
    ssize_t r = header_alone ? ::recv(p.fd.get(), p.header_bytes + p.header_got, FrameHeader::kBytes - p.header_got, 0)
                : direct     ? recv_payload_and_mac(p.fd.get(), p.target + p.target_got, left, p.mac.data(),
                                                    p.mac_bytes())
                             : ::recv(p.fd.get(), p.stage.get() + p.stage_kept, stage_read, 0);
    if (r > 0 && header_alone) {
      header_arrived(p, size_t(r));
      continue;
    }
    if (r > 0 && direct) {
      const size_t payload = std::min(size_t(r), left);
      if (p.auth) p.auth->add_incoming({p.target + p.target_got, payload});
      p.target_got += payload;
      p.mac_got = size_t(r) - payload;
      if (payload_done(p)) return;
      continue;
    }
    if (r > 0) {
      p.staged_at = 0;
      p.staged_end = p.stage_kept + size_t(r);
      p.stage_kept = 0;
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && header && p.header_got == 0 && p.bye) {
      p.fd.reset();  // clean goodbye; pending work on this peer fails below
      if (p.inbox.has_posted()) fail(fmt::format("{}: the peer shut down before sending", p.desc));
      return;
    }
    if (r == 0 && header && p.header_got == 0)
      fail(fmt::format("{}: connection closed by peer", p.desc));
    if (r == 0 && header)
      fail(fmt::format("{}: connection closed mid-frame (header {} of {} bytes)", p.desc,
                       p.header_got, p.header_length()));
    if (r == 0)
      fail(fmt::format("{}: connection closed mid-frame (payload {} of {} bytes)", p.desc,
                       p.target_got, p.frame.length));
    fail(fmt::format("{}: receive failed: {}", p.desc, net::errno_text(errno)));
  }
}

void TcpTransport::progress(int timeout_ms) {
  thread_local std::vector<pollfd> fds;
  thread_local std::vector<Peer*> owners;
  fds.clear();
  owners.clear();
  for (auto& p : peers_) {
    if (!p || !p->fd) continue;
    if (p->read == Peer::Read::Stalled) route_payload(*p);
    // Staged bytes are invisible to poll(2): take them, and do not sleep.
    if (p->has_staged() && p->read != Peer::Read::Stalled) {
      read_ready(*p);
      timeout_ms = 0;
      if (!p->fd) continue;
    }
    short events = p->read != Peer::Read::Stalled ? POLLIN : 0;
    if (!p->sendq.empty()) events |= POLLOUT;
    fds.push_back({p->fd.get(), events, 0});
    owners.push_back(p.get());
  }
  if (fds.empty()) return;
  int rc = ::poll(fds.data(), fds.size(), timeout_ms);
  if (rc < 0 && errno != EINTR) fail(fmt::format("tcp: poll failed: {}", net::errno_text(errno)));
  if (rc <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    short ev = fds[i].revents;
    if (!ev) continue;
    Peer& p = *owners[i];
    if (ev & POLLOUT) flush_sends(p);
    if ((ev & (POLLIN | POLLHUP | POLLERR)) && p.read != Peer::Read::Stalled) read_ready(p);
  }
}

// poll(2) without a timeout costs as much as a recv that finds nothing, so
// while polling a waiter reads the peers it waits for directly (and flushes
// every queued send, which those peers may be waiting for). A peer we wait
// to send to is read as well: it may be stuck sending to us, and if both
// only pushed, each would wait for the other's buffer until the poll phase
// ended.
void TcpTransport::progress_pending(std::span<const RequestPtr> requests) {
  for (auto& p : peers_)
    if (p && p->fd && !p->sendq.empty()) flush_sends(*p);
  for (const RequestPtr& r : requests) {
    if (r->done()) continue;
    Peer& p = *peers_[size_t(r->peer())];
    if (p.read == Peer::Read::Stalled) route_payload(p);
    if (p.fd && p.read != Peer::Read::Stalled) read_ready(p);
  }
}

bool TcpTransport::test(const RequestPtr& r) {
  check_failed();
  if (!r->done()) progress(0);
  return r->done();
}

void TcpTransport::wait_all(std::span<const RequestPtr> requests, Deadline deadline) {
  check_failed();
  auto first_pending = [&]() -> const Request* {
    for (auto& r : requests)
      if (!r->done()) return r.get();
    return nullptr;
  };
  if (!first_pending()) return;
  Poller poller(wait_rule_.now());
  bool polling = true;
  for (uint32_t looks = 0;; ++looks) {
    if (polling) progress_pending(requests);
    else progress(0);
    const Request* pending = first_pending();
    if (!pending) return;
    Peer& p = *peers_[size_t(pending->peer())];
    if (!p.fd)
      fail(fmt::format("{}: the peer has shut down with a transfer pending", p.desc));
    polling = poller.poll_again();
    // A clock read costs a sixth of a look (a recv(2) that finds nothing), so
    // a poller checks the deadline every 64th look, and before every sleep.
    if (polling && (looks & 63) != 63) continue;
    auto now = SteadyClock::now();
    if (now >= deadline)
      fail(fmt::format("{}: timed out waiting to {} (tag {:#x}; the peer died or stalled)",
                       p.desc, pending->is_send() ? "send" : "receive", pending->tag()));
    if (!polling) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      progress(int(std::clamp<int64_t>(left + 1, 1, 1000)));
    }
  }
}

}  // namespace shardlm::comm::tcp
