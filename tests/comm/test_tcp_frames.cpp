// The TCP transport's frame handling against a hand-driven peer on a socket
// pair: malformed, truncated, oversized, stalled and aborted frames, and
// buffering of frames that arrive before their receive is posted.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "comm/reduce.h"
#include "comm/tcp/tcp_transport.h"
#include "core/error.h"

namespace shardlm::comm::tcp {
namespace {

using namespace std::chrono_literals;

struct Pair {
  std::unique_ptr<TcpTransport> t;  // rank 0
  net::Fd peer;                          // raw end playing rank 1
  // Rank 1's MACs (the link's key: none; it connected): of the frames it
  // writes, and of those it reads from rank 0.
  net::FrameAuth fake{net::SessionKey{}, net::Role::Connector};
};

// A frame as a peer writes it: header, pad (never read: any bytes), payload, MAC.
std::vector<uint8_t> frame_bytes(net::FrameAuth& auth, const FrameHeader& h, const void* data, size_t bytes) {
  const auto* header = reinterpret_cast<const uint8_t*>(&h);
  const auto* payload = static_cast<const uint8_t*>(data);
  const net::FrameTag mac = auth.seal({{header, sizeof h}, {payload, bytes}});
  const size_t at = sizeof h + h.pad_bytes();
  std::vector<uint8_t> frame(at + bytes + mac.size(), uint8_t(0xEE));
  std::memcpy(frame.data(), header, sizeof h);
  if (bytes) std::memcpy(frame.data() + at, payload, bytes);
  std::memcpy(frame.data() + at + bytes, mac.data(), mac.size());
  return frame;
}

Pair make_pair(TcpLimits limits = {}, bool tagged = true) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  net::set_nonblocking(sv[0]);
  std::vector<PeerLink> links(2);
  links[1] = {net::Fd(sv[0]), "fake", std::nullopt};
  if (tagged) links[1].auth.emplace(net::SessionKey{}, net::Role::Acceptor);
  Timeouts to;
  to.op = 500ms;
  Pair p;
  p.t = std::make_unique<TcpTransport>(0, 2, std::move(links), to, limits);
  p.peer = net::Fd(sv[1]);
  return p;
}

// A frame from the fake peer; with fewer bytes than `length`, cut short there (no MAC).
void put_frame(Pair& p, uint8_t type, uint64_t tag, uint64_t length, const void* data, size_t data_bytes) {
  FrameHeader h;
  h.type = type;
  h.tag = tag;
  h.length = length;
  std::vector<uint8_t> frame = frame_bytes(p.fake, h, data, data_bytes);
  if (data_bytes < length) frame.resize(sizeof h + data_bytes);
  ASSERT_EQ(::write(p.peer.get(), frame.data(), frame.size()), ssize_t(frame.size()));
}

std::string recv_error(TcpTransport& t, uint64_t tag, size_t capacity) {
  std::vector<uint8_t> buf(capacity + 1);
  try {
    RequestPtr r = t.irecv(1, tag, buf.data(), capacity);
    t.wait_all(std::span<const RequestPtr>(&r, 1), SteadyClock::now() + 500ms);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

TEST(TcpFrames, WellFormedFramesArriveIntactEvenBeforeTheirReceive) {
  auto p = make_pair();
  put_frame(p, FrameHeader::kData, 7, 5, "hello", 5);
  put_frame(p, FrameHeader::kData, 8, 3, "abc", 3);
  char a[8] = {}, b[8] = {};
  RequestPtr rb = p.t->irecv(1, 8, b, sizeof b);  // out of order: tag 7 gets buffered
  RequestPtr ra = p.t->irecv(1, 7, a, sizeof a);
  RequestPtr both[2] = {ra, rb};
  p.t->wait_all(both, SteadyClock::now() + 2s);
  EXPECT_EQ(std::string(a, ra->bytes()), "hello");
  EXPECT_EQ(std::string(b, rb->bytes()), "abc");

  char out[3] = {'x', 'y', 'z'};
  RequestPtr s = p.t->isend(1, 9, out, 3);
  p.t->wait_all(std::span<const RequestPtr>(&s, 1), SteadyClock::now() + 2s);
  FrameHeader h;
  uint8_t got[3];
  net::FrameTag mac;
  ASSERT_EQ(::read(p.peer.get(), &h, sizeof h), ssize_t(sizeof h));
  ASSERT_EQ(::read(p.peer.get(), got, 3), 3);
  ASSERT_EQ(::read(p.peer.get(), mac.data(), mac.size()), ssize_t(mac.size()));
  EXPECT_EQ(h.magic, FrameHeader::kMagic);
  EXPECT_EQ(h.tag, 9u);
  EXPECT_EQ(h.length, 3u);
  EXPECT_EQ(std::string(got, got + 3), "xyz");
  EXPECT_TRUE(p.fake.verify({{reinterpret_cast<const uint8_t*>(&h), sizeof h}, {got, 3}}, mac));
}

// After a long frame the next header is read on its own (no staging); a
// header split across writes, short frames behind it and a header cut short
// must all still come out right.
TEST(TcpFrames, HeadersAfterLongFramesSplitShortFramesAndTruncation) {
  auto p = make_pair();
  const int fd = p.peer.get();
  std::vector<uint8_t> big(100000), got(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 7 + 3);
  auto receive_big = [&](uint64_t tag) {
    put_frame(p, FrameHeader::kData, tag, big.size(), big.data(), big.size());
    std::fill(got.begin(), got.end(), 0);
    RequestPtr r = p.t->irecv(1, tag, got.data(), got.size());
    p.t->wait_all(std::span<const RequestPtr>(&r, 1), SteadyClock::now() + 2s);
    ASSERT_EQ(r->bytes(), big.size());
    EXPECT_TRUE(got == big) << "long frame " << tag;
  };
  receive_big(1);

  FrameHeader h;
  h.tag = 2;
  h.length = 5;
  const std::vector<uint8_t> split = frame_bytes(p.fake, h, "hello", 5);
  ASSERT_EQ(::write(fd, split.data(), 10), 10);
  char a[8] = {}, b[8] = {};
  RequestPtr ra = p.t->irecv(1, 2, a, sizeof a);
  EXPECT_FALSE(p.t->test(ra));
  ASSERT_EQ(::write(fd, split.data() + 10, split.size() - 10), ssize_t(split.size() - 10));
  put_frame(p, FrameHeader::kData, 3, 3, "abc", 3);
  RequestPtr rb = p.t->irecv(1, 3, b, sizeof b);
  RequestPtr both[2] = {ra, rb};
  p.t->wait_all(both, SteadyClock::now() + 2s);
  EXPECT_EQ(std::string(a, ra->bytes()), "hello");
  EXPECT_EQ(std::string(b, rb->bytes()), "abc");

  receive_big(4);
  ASSERT_EQ(::write(fd, "SLMF", 4), 4);
  p.peer.reset();
  EXPECT_TRUE(contains(recv_error(*p.t, 5, 16), "closed mid-frame (header 4 of 24 bytes)"));
}

TEST(TcpFrames, GarbageClosesTheConnectionNamingThePeer) {
  auto p = make_pair();
  std::string junk(64, '\x42');
  ASSERT_EQ(::write(p.peer.get(), junk.data(), junk.size()), ssize_t(junk.size()));
  std::string e = recv_error(*p.t, 1, 16);
  EXPECT_TRUE(contains(e, "rank 1 (fake)")) << e;
  EXPECT_TRUE(contains(e, "malformed frame header")) << e;
  // Failed for good: later calls throw the same error at once.
  char c = 0;
  EXPECT_THROW(p.t->isend(1, 1, &c, 1), Error);
}

TEST(TcpFrames, TruncatedFrameIsReportedWithItsProgress) {
  auto p = make_pair();
  std::string part(10, 'x');
  put_frame(p, FrameHeader::kData, 1, 1000, part.data(), part.size());
  p.peer.reset();
  std::string e = recv_error(*p.t, 1, 4096);
  EXPECT_TRUE(contains(e, "closed mid-frame (payload 10 of 1000 bytes)")) << e;
  EXPECT_TRUE(contains(e, "rank 1 (fake)")) << e;
}

TEST(TcpFrames, TruncatedHeaderIsReported) {
  auto p = make_pair();
  ASSERT_EQ(::write(p.peer.get(), "SLMF", 4), 4);
  p.peer.reset();
  EXPECT_TRUE(contains(recv_error(*p.t, 1, 16), "closed mid-frame (header 4 of 24 bytes)"));
}

TEST(TcpFrames, FrameLongerThanTheReceiveBufferIsRefused) {
  auto p = make_pair();
  put_frame(p, FrameHeader::kData, 1, 100, nullptr, 0);
  std::string e = recv_error(*p.t, 1, 16);
  EXPECT_TRUE(contains(e, "exceeds the receive buffer of 16 bytes")) << e;
}

TEST(TcpFrames, HugeAnnouncedLengthIsRefusedWithoutAllocating) {
  TcpLimits limits;
  limits.max_frame_bytes = 1 << 20;
  auto p = make_pair(limits);
  put_frame(p, FrameHeader::kData, 1, uint64_t(1) << 62, nullptr, 0);
  std::string e = recv_error(*p.t, 2, 16);  // no receive for tag 1 posted
  EXPECT_TRUE(contains(e, "exceeds the 1048576 byte limit")) << e;
}

TEST(TcpFrames, StalledPeerTimesOutNamingIt) {
  auto p = make_pair();
  put_frame(p, FrameHeader::kData, 1, 100, "abc", 3);  // and then nothing
  auto t0 = SteadyClock::now();
  std::string e = recv_error(*p.t, 1, 128);
  EXPECT_TRUE(contains(e, "rank 1 (fake): timed out")) << e;
  EXPECT_LT(SteadyClock::now() - t0, 10s);
}

TEST(TcpFrames, AbortFrameFailsWithTheRemoteReason) {
  auto p = make_pair();
  std::string why = "rank 3 (10.0.0.3:7000): connection closed by peer";
  put_frame(p, FrameHeader::kAbort, 0, why.size(), why.data(), why.size());
  std::string e = recv_error(*p.t, 1, 16);
  EXPECT_EQ(e, "rank 1 (fake) aborted: " + why);
}

TEST(TcpFrames, AbortIsSentToPeersOnFailure) {
  auto p = make_pair();
  p.t->abort("local trouble");
  FrameHeader h;
  ASSERT_EQ(::read(p.peer.get(), &h, sizeof h), ssize_t(sizeof h));
  EXPECT_EQ(h.type, FrameHeader::kAbort);
  std::string reason(h.length, '\0');
  net::FrameTag mac;
  ASSERT_EQ(::read(p.peer.get(), reason.data(), reason.size()), ssize_t(reason.size()));
  ASSERT_EQ(::read(p.peer.get(), mac.data(), mac.size()), ssize_t(mac.size()));
  EXPECT_EQ(reason, "local trouble");
  const auto* reason_bytes = reinterpret_cast<const uint8_t*>(reason.data());
  EXPECT_TRUE(p.fake.verify({{reinterpret_cast<const uint8_t*>(&h), sizeof h}, {reason_bytes, reason.size()}}, mac));
}

// A link within one host (connect_tcp: both ends' addresses the same) carries frames without MACs.
TEST(TcpFrames, AnUntaggedLinkCarriesNoMacs) {
  auto p = make_pair({}, /*tagged=*/false);
  FrameHeader h;
  h.tag = 4;
  h.length = 5;
  ASSERT_EQ(::write(p.peer.get(), &h, sizeof h), ssize_t(sizeof h));
  ASSERT_EQ(::write(p.peer.get(), "hello", 5), 5);
  char got[5];
  RequestPtr r = p.t->irecv(1, 4, got, 5);
  p.t->wait_all(std::span<const RequestPtr>(&r, 1), SteadyClock::now() + 2s);
  EXPECT_EQ(std::string(got, 5), "hello");
  RequestPtr s = p.t->isend(1, 5, "abc", 3);
  p.t->wait_all(std::span<const RequestPtr>(&s, 1), SteadyClock::now() + 2s);
  uint8_t out[sizeof h + 3 + 1];
  EXPECT_EQ(::recv(p.peer.get(), out, sizeof out, MSG_DONTWAIT), ssize_t(sizeof h + 3));
}

// A frame changed on the way (header, payload or MAC), replayed, or written
// under another key fails the transport naming the peer and the frame; a
// combining receive of one never completes.
TEST(TcpFrames, AlteredReplayedOrForgedFramesFailTheTransport) {
  FrameHeader h;
  h.tag = 1;
  h.length = 8;
  const float pair[2] = {1.5f, -2.0f};
  for (const size_t at : {size_t(16), sizeof h + 5, sizeof h + 8 + 3}) {  // the length's word, payload, MAC
    auto p = make_pair();
    std::vector<uint8_t> frame = frame_bytes(p.fake, h, pair, 8);
    if (at == 16) {
      frame[at] = 4;  // a shorter length: the MAC is read where the payload was
    } else {
      frame[at] ^= 1;
    }
    ASSERT_EQ(::write(p.peer.get(), frame.data(), frame.size()), ssize_t(frame.size()));
    const std::string e = recv_error(*p.t, 1, 8);
    EXPECT_TRUE(contains(e, "rank 1 (fake): frame 1 failed its integrity check")) << e << " (byte " << at << ")";
  }
  {
    auto p = make_pair();
    const std::vector<uint8_t> frame = frame_bytes(p.fake, h, pair, 8);
    ASSERT_EQ(::write(p.peer.get(), frame.data(), frame.size()), ssize_t(frame.size()));
    ASSERT_EQ(::write(p.peer.get(), frame.data(), frame.size()), ssize_t(frame.size()));
    char got[8];
    RequestPtr r = p.t->irecv(1, 1, got, 8);
    p.t->wait_all(std::span<const RequestPtr>(&r, 1), SteadyClock::now() + 2s);
    const std::string e = recv_error(*p.t, 1, 8);
    EXPECT_TRUE(contains(e, "frame 2 failed its integrity check")) << e;
  }
  {
    auto p = make_pair();
    net::SessionKey other{};
    other[0] = 1;
    net::FrameAuth forger(other, net::Role::Connector);
    const std::vector<uint8_t> frame = frame_bytes(forger, h, pair, 8);
    ASSERT_EQ(::write(p.peer.get(), frame.data(), frame.size()), ssize_t(frame.size()));
    float acc[2] = {10, 20};
    std::string e;
    RequestPtr r;
    try {
      r = p.t->irecv_reduce(1, 1, acc, 2, DType::F32, ReduceOp::Sum, false);
      p.t->wait_all(std::span<const RequestPtr>(&r, 1), SteadyClock::now() + 2s);
    } catch (const Error& err) {
      e = err.what();
    }
    EXPECT_TRUE(contains(e, "rank 1 (fake): frame 1 failed its integrity check")) << e;
    EXPECT_FALSE(r && r->done());
  }
}

TEST(TcpFrames, BackPressureInsteadOfUnboundedBuffering) {
  TcpLimits limits;
  limits.max_unexpected_bytes = 100;
  auto p = make_pair(limits);
  std::string x(80, 'x'), y(80, 'y');
  put_frame(p, FrameHeader::kData, 1, 80, x.data(), 80);
  put_frame(p, FrameHeader::kData, 2, 80, y.data(), 80);
  char nothing = 0;
  RequestPtr other = p.t->irecv(1, 3, &nothing, 1);
  EXPECT_FALSE(p.t->test(other));  // tag 1 buffered, tag 2 held back in the socket
  std::vector<char> b2(80), b1(80);
  RequestPtr r2 = p.t->irecv(1, 2, b2.data(), 80);
  RequestPtr r1 = p.t->irecv(1, 1, b1.data(), 80);
  RequestPtr both[2] = {r1, r2};
  p.t->wait_all(both, SteadyClock::now() + 2s);
  EXPECT_EQ(std::string(b1.begin(), b1.end()), x);
  EXPECT_EQ(std::string(b2.begin(), b2.end()), y);
}

TEST(TcpFrames, GoodbyeThenCloseIsCleanUntilSomethingIsNeeded) {
  auto p = make_pair();
  put_frame(p, FrameHeader::kData, 1, 2, "ok", 2);
  put_frame(p, FrameHeader::kBye, 0, 0, nullptr, 0);
  p.peer.reset();
  char buf[2];
  RequestPtr r = p.t->irecv(1, 1, buf, 2);
  p.t->wait_all(std::span<const RequestPtr>(&r, 1), SteadyClock::now() + 2s);
  EXPECT_EQ(std::string(buf, 2), "ok");
  std::string e = recv_error(*p.t, 1, 2);
  EXPECT_TRUE(contains(e, "shut down")) << e;
}

// irecv_reduce sums out of the receive stage as bytes arrive: a payload
// dribbling in 1–7 bytes at a time (elements split across reads), shifted
// off alignment in the stage by an odd-length frame ahead of it, or arriving
// before its receive, wholly or in part (buffered, combined when the buffer
// is complete and claimed), must give the bits of
// receiving it whole and calling reduce_ordered with the same operand order.
// Max on ±0 and equal values tells the two orders apart.
TEST(TcpFrames, CombiningReceiveEqualsReceiveThenReduce) {
  constexpr size_t kCount = 999;
  std::vector<float> mine(kCount), theirs(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    mine[i] = i % 3 == 0 ? 0.0f : float(i % 17) * 0.37f - 2.0f;
    theirs[i] = i % 3 == 0 ? -0.0f : float(i % 13) * 0.61f - 3.0f;
  }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    for (bool message_first : {false, true}) {
      for (int variant = 0; variant < 6; ++variant) {
        const int post = variant % 3;  // the receive: before the frame, halfway, after it
        const bool dribble = variant >= 3;
        auto p = make_pair();
        const int fd = p.peer.get();
        if (dribble) put_frame(p, FrameHeader::kData, 1, 3, "odd", 3);
        char odd[3], nothing = 0;
        RequestPtr first = p.t->irecv(1, 1, odd, sizeof odd);
        RequestPtr never = p.t->irecv(1, 3, &nothing, 1);  // test() reads only while one waits
        std::vector<float> acc = mine;
        RequestPtr r;
        auto post_reduce = [&] {
          r = p.t->irecv_reduce(1, 2, acc.data(), kCount, DType::F32, op, message_first);
        };
        if (post == 0) post_reduce();
        std::vector<uint8_t> wire;
        if (!dribble) {
          FrameHeader o;
          o.tag = 1;
          o.length = 3;
          wire = frame_bytes(p.fake, o, "odd", 3);
        }
        FrameHeader h;
        h.tag = 2;
        h.length = kCount * 4;
        const std::vector<uint8_t> sums = frame_bytes(p.fake, h, theirs.data(), h.length);
        wire.insert(wire.end(), sums.begin(), sums.end());
        // Dribbled (elements split across reads), or at once: then the
        // payload lands 3 bytes off alignment in the stage behind "odd".
        for (size_t at = 0, step = 1; at < wire.size(); step = step % 7 + 1) {
          const size_t n = dribble ? std::min(step, wire.size() - at) : wire.size();
          ASSERT_EQ(::write(fd, wire.data() + at, n), ssize_t(n));
          at += n;
          p.t->test(never);
          if (post == 1 && !r && at >= wire.size() / 2) post_reduce();
        }
        if (!r) {
          EXPECT_TRUE(first->done());
          post_reduce();
        }
        p.t->wait_all(std::span<const RequestPtr>(&r, 1), SteadyClock::now() + 2s);
        EXPECT_EQ(std::string(odd, 3), "odd");
        ASSERT_EQ(r->bytes(), kCount * 4);
        std::vector<float> want(kCount);
        const void* order[2] = {message_first ? theirs.data() : mine.data(),
                                message_first ? mine.data() : theirs.data()};
        reduce_ordered(want.data(), order, kCount, DType::F32, op);
        EXPECT_EQ(std::memcmp(acc.data(), want.data(), h.length), 0)
            << reduce_op_name(op) << " message_first=" << message_first << " post=" << post
            << " dribble=" << dribble;
      }
    }
  }
}

// Combining receives read up to 128 KiB at a time (the stage grows for them,
// keeping a split element), and after a long combined frame the next header
// with as much: behind a 3-byte frame (so the first read ends mid-element), a long
// combined frame, then a long plain one (partly staged that way), a short
// combined one and a short plain one each arrive intact in their own receive.
TEST(TcpFrames, LargeCombiningReadsLeaveTheFollowingFramesIntact) {
  auto p = make_pair();
  constexpr size_t kLong = 50'000, kShort = 5, kPlain = 70'001;
  std::vector<float> mine(kLong), theirs(kLong), small_mine(kShort), small_theirs(kShort);
  for (size_t i = 0; i < kLong; ++i) {
    mine[i] = float(i % 29) * 0.25f - 3.0f;
    theirs[i] = float(i % 31) * 0.37f + 1.01f;  // low bytes not 0: a lost byte shows
  }
  for (size_t i = 0; i < kShort; ++i) small_mine[i] = float(i), small_theirs[i] = 10.0f * float(i);
  std::vector<uint8_t> plain(kPlain);
  for (size_t i = 0; i < kPlain; ++i) plain[i] = uint8_t(i * 7 + 1);
  std::vector<uint8_t> wire;
  auto add = [&](uint64_t tag, const void* data, size_t bytes) {
    FrameHeader h;
    h.tag = tag;
    h.length = bytes;
    const std::vector<uint8_t> frame = frame_bytes(p.fake, h, data, bytes);
    wire.insert(wire.end(), frame.begin(), frame.end());
  };
  add(5, "odd", 3);
  add(1, theirs.data(), kLong * 4);
  add(2, plain.data(), kPlain);
  add(3, small_theirs.data(), kShort * 4);
  add(4, "tail", 4);
  std::vector<float> acc = mine, small_acc = small_mine;
  std::vector<uint8_t> got(kPlain);
  char tail[4] = {}, odd[3] = {};
  RequestPtr rs[5] = {p.t->irecv(1, 5, odd, sizeof odd),
                      p.t->irecv_reduce(1, 1, acc.data(), kLong, DType::F32, ReduceOp::Sum, false),
                      p.t->irecv(1, 2, got.data(), kPlain),
                      p.t->irecv_reduce(1, 3, small_acc.data(), kShort, DType::F32, ReduceOp::Sum, true),
                      p.t->irecv(1, 4, tail, sizeof tail)};
  // The first read (a 32 KiB stage) then finds it all there; the rest is more
  // than a socket pair buffers: the writer blocks until the transport reads.
  constexpr size_t kFirst = 40'000;
  ASSERT_EQ(::write(p.peer.get(), wire.data(), kFirst), ssize_t(kFirst));
  std::thread writer([&] {
    for (size_t at = kFirst; at < wire.size();) {
      const ssize_t n = ::write(p.peer.get(), wire.data() + at, wire.size() - at);
      if (n <= 0) return;
      at += size_t(n);
    }
  });
  p.t->wait_all(rs, SteadyClock::now() + 5s);
  writer.join();
  std::vector<float> want(kLong), small_want(kShort);
  const void* order[2] = {mine.data(), theirs.data()};
  reduce_ordered(want.data(), order, kLong, DType::F32, ReduceOp::Sum);
  const void* small_order[2] = {small_theirs.data(), small_mine.data()};
  reduce_ordered(small_want.data(), small_order, kShort, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(std::memcmp(acc.data(), want.data(), kLong * 4), 0);
  EXPECT_EQ(got, plain);
  EXPECT_EQ(std::memcmp(small_acc.data(), small_want.data(), kShort * 4), 0);
  EXPECT_EQ(std::string(tail, 4), "tail");
  EXPECT_EQ(std::string(odd, 3), "odd");
}

// A header's pad (FrameHeader::pad_words) is skipped wherever the frame is
// read: through the stage, straight into a long receive, into a combining
// receive; written in pieces of every size. Long sends carry one.
TEST(TcpFrames, PaddedHeadersAreSkippedAndLongSendsPadded) {
  auto p = make_pair();
  constexpr size_t kLong = 60'000, kPlain = 90'001;
  std::vector<float> mine(kLong), theirs(kLong);
  for (size_t i = 0; i < kLong; ++i) {
    mine[i] = float(i % 23) * 0.5f - 2.0f;
    theirs[i] = float(i % 37) * 0.29f + 1.03f;
  }
  std::vector<uint8_t> plain(kPlain);
  for (size_t i = 0; i < kPlain; ++i) plain[i] = uint8_t(i * 11 + 5);
  std::vector<uint8_t> wire;
  auto add = [&](uint64_t tag, const void* data, size_t bytes, uint8_t pad_words) {
    FrameHeader h;
    h.tag = tag;
    h.length = bytes;
    h.pad_words = pad_words;
    const std::vector<uint8_t> frame = frame_bytes(p.fake, h, data, bytes);  // pad content is never read
    wire.insert(wire.end(), frame.begin(), frame.end());
  };
  add(1, "abc", 3, 1);
  add(2, plain.data(), kPlain, 61);    // long, read straight into its buffer
  add(3, theirs.data(), kLong * 4, 255);  // combining receive
  add(4, plain.data(), kPlain, 0);
  add(5, "tail", 4, 3);
  std::vector<float> acc = mine;
  std::vector<uint8_t> got2(kPlain), got4(kPlain);
  char abc[3] = {}, tail[4] = {};
  RequestPtr rs[5] = {p.t->irecv(1, 1, abc, sizeof abc), p.t->irecv(1, 2, got2.data(), kPlain),
                      p.t->irecv_reduce(1, 3, acc.data(), kLong, DType::F32, ReduceOp::Sum, false),
                      p.t->irecv(1, 4, got4.data(), kPlain), p.t->irecv(1, 5, tail, sizeof tail)};
  std::thread writer([&] {
    for (size_t at = 0, piece = 1; at < wire.size(); piece = piece * 3 % 1000 + 1) {
      const ssize_t n = ::write(p.peer.get(), wire.data() + at, std::min(piece, wire.size() - at));
      if (n <= 0) return;
      at += size_t(n);
    }
  });
  p.t->wait_all(rs, SteadyClock::now() + 5s);
  writer.join();
  std::vector<float> want(kLong);
  const void* order[2] = {mine.data(), theirs.data()};
  reduce_ordered(want.data(), order, kLong, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(std::string(abc, 3), "abc");
  EXPECT_EQ(got2, plain);
  EXPECT_EQ(std::memcmp(acc.data(), want.data(), kLong * 4), 0);
  EXPECT_EQ(got4, plain);
  EXPECT_EQ(std::string(tail, 4), "tail");

  // A long send: header, zero pad up to kPaddedBytes, payload.
  std::vector<uint8_t> out(FrameHeader::kPadFromBytes);
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(i * 13 + 7);
  RequestPtr s = p.t->isend(1, 6, out.data(), out.size());
  std::vector<uint8_t> seen(FrameHeader::kPaddedBytes + out.size() + sizeof(net::FrameTag));
  std::thread reader([&] {
    for (size_t at = 0; at < seen.size();) {
      const ssize_t n = ::read(p.peer.get(), seen.data() + at, seen.size() - at);
      if (n <= 0) return;
      at += size_t(n);
    }
  });
  p.t->wait_all(std::span<const RequestPtr>(&s, 1), SteadyClock::now() + 5s);
  reader.join();
  FrameHeader h;
  std::memcpy(&h, seen.data(), sizeof h);
  EXPECT_EQ(h.tag, 6u);
  EXPECT_EQ(h.length, out.size());
  EXPECT_EQ(FrameHeader::kBytes + h.pad_bytes(), FrameHeader::kPaddedBytes);
  EXPECT_TRUE(std::all_of(seen.begin() + FrameHeader::kBytes, seen.begin() + FrameHeader::kPaddedBytes,
                          [](uint8_t b) { return b == 0; }));
  EXPECT_TRUE(std::equal(out.begin(), out.end(), seen.begin() + FrameHeader::kPaddedBytes));
  net::FrameTag mac;
  std::memcpy(mac.data(), seen.data() + FrameHeader::kPaddedBytes + out.size(), mac.size());
  EXPECT_TRUE(p.fake.verify({{seen.data(), FrameHeader::kBytes}, out}, mac));

  // Cut off inside a pad: reported with the header's full length.
  FrameHeader cut;
  cut.tag = 7;
  cut.length = 8;
  cut.pad_words = 4;
  ASSERT_EQ(::write(p.peer.get(), &cut, sizeof cut), ssize_t(sizeof cut));
  ASSERT_EQ(::write(p.peer.get(), "\0\0\0\0\0", 5), 5);
  p.peer.reset();
  EXPECT_TRUE(contains(recv_error(*p.t, 7, 16), "closed mid-frame (header 29 of 56 bytes)"));
}

TEST(TcpFrames, CombiningReceiveRefusesAnotherLength) {
  auto p = make_pair();
  float twelve[3] = {1, 2, 3};
  put_frame(p, FrameHeader::kData, 1, 8, twelve, 8);
  float acc[3] = {};
  std::string e;
  try {
    RequestPtr r = p.t->irecv_reduce(1, 1, acc, 3, DType::F32, ReduceOp::Sum, false);
    p.t->wait_all(std::span<const RequestPtr>(&r, 1), SteadyClock::now() + 500ms);
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_TRUE(contains(e, "rank 1 (fake): message of 8 bytes")) << e;
  EXPECT_TRUE(contains(e, "lengths differ")) << e;
}

}  // namespace
}  // namespace shardlm::comm::tcp
