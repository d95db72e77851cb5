#include "comm/shm/shm_transport.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "comm/inbox.h"
#include "comm/shm/shm.h"
#include "core/env.h"
#include "core/error.h"

namespace shardlm::comm {

std::unique_ptr<Transport> connect_shm(const ConnectOptions& options) {
  return std::make_unique<shm::ShmTransport>(options);
}

}  // namespace shardlm::comm

namespace shardlm::comm::shm {
namespace {

constexpr size_t kHeaderBytes = 16;                   // tag, length (little endian u64s)
constexpr size_t kMaxMessage = size_t(1) << 40;       // anything longer is garbage
constexpr size_t kUnexpectedBudget = size_t(64) << 20;  // per peer, then back-pressure

SegmentConfig segment_config(const ConnectOptions& o) {
  if (o.rank < 0 || o.size < 1 || o.rank >= o.size)
    throw Error(
        fmt::format("shm: rank {} / size {} invalid (the shm backend needs both, 0 <= rank < size)", o.rank, o.size));
  SegmentConfig c;
  // The coordinator string names the session, so two worlds with the same
  // cluster id can run side by side on one host.
  c.cluster_id = o.cluster_id + '\n' + o.coordinator;
  c.token = o.token;
  c.rank = o.rank;
  c.world = o.size;
  c.slot_bytes = env_bytes("SHARDLM_SHM_SLOT_BYTES", c.slot_bytes);
  c.queue_bytes = env_bytes("SHARDLM_SHM_QUEUE_BYTES", c.queue_bytes);
  c.attach_timeout = o.timeouts.connect;
  c.spin = o.timeouts.spin;
  return c;
}

}  // namespace

struct ShmTransport::SendReq : Request {
  using Request::Request;
  std::array<std::byte, kHeaderBytes> header{};
  const std::byte* data = nullptr;
  size_t size = 0;
  size_t sent = 0;  // of header + payload
};

struct ShmTransport::Peer {
  Peer(std::string desc) : inbox(std::move(desc), buffered, kUnexpectedBudget) {}
  ByteQueue out, in;
  std::deque<std::shared_ptr<SendReq>> sends;
  size_t buffered = 0;  // this peer's messages waiting for their irecv
  Inbox inbox;
  // The message being read: header, then payload into `delivery` (empty: it
  // waits for an irecv or for buffer budget).
  std::array<std::byte, kHeaderBytes> header{};
  size_t header_got = 0;
  bool in_message = false;
  uint64_t tag = 0;
  size_t len = 0, got = 0;
  Inbox::Delivery delivery;
};

ShmTransport::ShmTransport(const ConnectOptions& options)
    : segment_(segment_config(options)), collectives_(segment_) {
  const int me = segment_.rank();
  const auto cap = uint32_t(segment_.queue_bytes());
  for (int p = 0; p < segment_.world(); ++p) {
    auto peer = std::make_unique<Peer>(describe_peer(p));
    if (p != me) {
      peer->out = ByteQueue{&segment_.queue_ctl(me, p), segment_.queue_data(me, p), cap};
      peer->in = ByteQueue{&segment_.queue_ctl(p, me), segment_.queue_data(p, me), cap};
    }
    peers_.push_back(std::move(peer));
  }
}

ShmTransport::~ShmTransport() = default;

std::string ShmTransport::describe_peer(int peer) const {
  return "rank " + std::to_string(peer) + " (shm pid " + std::to_string(segment_.pid_of(peer)) + ")";
}

void ShmTransport::throw_if_failed() const {
  if (failed_) throw Error(*failed_);
}

void ShmTransport::abort(const std::string& reason) noexcept {
  try {
    if (!failed_) failed_ = reason;
    segment_.declare_failed(reason);
  } catch (...) {
  }
}

template <class F>
bool ShmTransport::guarded(F&& f) {
  throw_if_failed();
  try {
    return f();
  } catch (const Error& e) {
    abort(e.what());
    throw;
  }
}

void ShmTransport::fail_peer(int p, const std::string& what) {
  throw Error(fmt::format("{}: {}", describe_peer(p), what));
}

RequestPtr ShmTransport::isend(int peer, uint64_t tag, const void* data, size_t bytes) {
  throw_if_failed();
  auto r = std::make_shared<SendReq>(peer, tag, true);
  const uint64_t len = bytes;
  std::memcpy(r->header.data(), &tag, 8);
  std::memcpy(r->header.data() + 8, &len, 8);
  r->data = static_cast<const std::byte*>(data);
  r->size = bytes;
  peers_.at(size_t(peer))->sends.push_back(r);
  guarded([&] { return progress_out(peer); });
  return r;
}

RequestPtr ShmTransport::irecv(int peer, uint64_t tag, void* data, size_t capacity) {
  throw_if_failed();
  Peer& pr = *peers_.at(size_t(peer));
  RequestPtr r;
  guarded([&] {
    r = pr.inbox.post(peer, tag, data, capacity);
    if (r->done()) return true;
    if (pr.in_message && !pr.delivery) start_message(peer);  // it waited for us
    return progress_in(peer);
  });
  return r;
}

bool ShmTransport::progress_out(int p) {
  Peer& pr = *peers_[size_t(p)];
  bool moved = false;
  while (!pr.sends.empty()) {
    SendReq& s = *pr.sends.front();
    if (s.sent < kHeaderBytes) {
      const size_t n = pr.out.write_some(s.header.data() + s.sent, kHeaderBytes - s.sent);
      s.sent += n;
      moved |= n > 0;
      if (s.sent < kHeaderBytes) break;
    }
    const size_t off = s.sent - kHeaderBytes;
    if (off < s.size) {
      const size_t n = pr.out.write_some(s.data + off, s.size - off);
      s.sent += n;
      moved |= n > 0;
      if (s.sent - kHeaderBytes < s.size) break;
    }
    s.finish(s.size);
    pr.sends.pop_front();
  }
  if (moved) segment_.ring_doorbell(p);
  return moved;
}

void ShmTransport::start_message(int p) {
  Peer& pr = *peers_[size_t(p)];
  pr.delivery = pr.inbox.arrive(pr.tag, pr.len);
}

void ShmTransport::finish_message(int p) {
  Peer& pr = *peers_[size_t(p)];
  pr.inbox.complete(pr.delivery);
  pr.in_message = false;
}

bool ShmTransport::progress_in(int p) {
  Peer& pr = *peers_[size_t(p)];
  bool moved = false;
  for (;;) {
    if (!pr.in_message) {
      const size_t n = pr.in.read_some(pr.header.data() + pr.header_got, kHeaderBytes - pr.header_got);
      pr.header_got += n;
      moved |= n > 0;
      if (pr.header_got < kHeaderBytes) break;
      uint64_t len = 0;
      std::memcpy(&pr.tag, pr.header.data(), 8);
      std::memcpy(&len, pr.header.data() + 8, 8);
      if (len > kMaxMessage) fail_peer(p, fmt::format("sent a message header with length {}", len));
      pr.header_got = 0;
      pr.in_message = true;
      pr.len = size_t(len);
      pr.got = 0;
      start_message(p);
    }
    if (!pr.delivery) break;
    std::byte* dst = pr.delivery.data();
    if (pr.got < pr.len) {
      const size_t n = pr.in.read_some(dst + pr.got, pr.len - pr.got);
      pr.got += n;
      moved |= n > 0;
    }
    if (pr.got < pr.len) break;
    finish_message(p);
  }
  if (moved) segment_.ring_doorbell(p);
  return moved;
}

bool ShmTransport::progress() {
  bool moved = false;
  for (int p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    moved |= progress_out(p);
    moved |= progress_in(p);
  }
  return moved;
}

bool ShmTransport::test(const RequestPtr& r) {
  if (r->done()) return true;
  guarded([&] { return progress(); });
  return r->done();
}

void ShmTransport::wait_all(std::span<const RequestPtr> requests, Deadline deadline) {
  guarded([&] {
    for (;;) {
      const uint32_t bell = load_acquire(segment_.doorbell(rank()));
      progress();
      const auto pending = std::find_if(requests.begin(), requests.end(), [](const RequestPtr& r) { return !r->done(); });
      if (pending == requests.end()) return true;
      const RequestPtr& r = *pending;
      WaitSpec spec = segment_.wait_spec(r->peer(), deadline, "");
      spec.check = [this, requests] {
        for (const RequestPtr& q : requests)
          if (!q->done()) segment_.check_peer(q->peer());
      };
      spec.describe = [this, r] {
        return describe_peer(r->peer()) + " (" + (r->is_send() ? "send" : "recv") + " tag " +
               std::to_string(r->tag()) + ")";
      };
      wait_for(segment_.doorbell(rank()), bell + 1, spec);
    }
  });
}

bool ShmTransport::is_world(const Group& g) const {
  if (g.size() != size()) return false;
  for (int i = 0; i < g.size(); ++i)
    if (g.ranks[size_t(i)] != i) return false;
  return true;
}

bool ShmTransport::all_reduce(const Group& g, void* buf, size_t count, DType dtype, ReduceOp op, Deadline deadline) {
  if (!is_world(g)) return false;
  return guarded([&] {
    collectives_.all_reduce(buf, count, dtype, op, deadline);
    return true;
  });
}

bool ShmTransport::reduce_scatter(const Group& g, const void* send, void* recv, size_t count_per_rank, DType dtype,
                                  ReduceOp op, Deadline deadline) {
  if (!is_world(g)) return false;
  return guarded([&] {
    collectives_.reduce_scatter(send, recv, count_per_rank, dtype, op, deadline);
    return true;
  });
}

bool ShmTransport::all_gather(const Group& g, const void* send, void* recv, size_t bytes_per_rank,
                              Deadline deadline) {
  if (!is_world(g)) return false;
  return guarded([&] {
    collectives_.all_gather(send, recv, bytes_per_rank, deadline);
    return true;
  });
}

bool ShmTransport::broadcast(const Group& g, void* buf, size_t bytes, int root_index, Deadline deadline) {
  if (!is_world(g)) return false;
  return guarded([&] {
    collectives_.broadcast(buf, bytes, root_index, deadline);
    return true;
  });
}

bool ShmTransport::barrier(const Group& g, Deadline deadline) {
  if (!is_world(g)) return false;
  return guarded([&] {
    collectives_.barrier(deadline);
    return true;
  });
}

}  // namespace shardlm::comm::shm
