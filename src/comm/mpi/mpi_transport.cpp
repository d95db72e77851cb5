#include "comm/mpi/mpi_transport.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fmt/format.h>
#include <thread>

#include <sched.h>

#include "comm/inbox.h"
#include "comm/reduce.h"
#include "comm/mpi/mpi.h"
#include "core/error.h"

namespace shardlm::comm {

std::unique_ptr<Transport> connect_mpi(const ConnectOptions& options) {
  return std::make_unique<mpi::MpiTransport>(options);
}

}  // namespace shardlm::comm

namespace shardlm::comm::mpi {
namespace {

enum MpiTag : int { kEnvelope = 1, kPayload = 2, kInline = 3 };
constexpr size_t kEnvelopeBytes = 16;                   // tag, length
constexpr size_t kInlineMax = 8 << 10;                  // one message up to here
constexpr size_t kUnexpectedBudget = size_t(64) << 20;  // per peer, then back-pressure

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(fmt::format("mpi: {} failed: {}", what, std::string(text, size_t(len))));
}

// MPI has no 16-bit float type: f16/bf16 sums travel as MPI_UINT16_T with
// this op, which widens to f32 and rounds once per addition (reduce_into).
// round(a + b) == round(b + a), so it is commutative as MPI is told.
template <DType T>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, size_t(*len), T, ReduceOp::Sum);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::array<std::byte, kEnvelopeBytes> envelope(uint64_t tag, uint64_t len) {
  std::array<std::byte, kEnvelopeBytes> e;
  std::memcpy(e.data(), &tag, 8);
  std::memcpy(e.data() + 8, &len, 8);
  return e;
}

}  // namespace

struct MpiTransport::SendReq : Request {
  using Request::Request;
  std::vector<std::byte> staging;  // envelope (+ payload when inline)
  std::array<MPI_Request, 2> reqs{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  size_t size = 0;
};

struct MpiTransport::Peer {
  explicit Peer(std::string desc) : inbox(std::move(desc), buffered, kUnexpectedBudget) {}
  size_t buffered = 0;  // this peer's messages waiting for their irecv
  Inbox inbox;
  // An envelope received whose payload has no destination yet.
  bool pending = false;
  uint64_t tag = 0;
  size_t len = 0;
  struct Payload {
    MPI_Request req = MPI_REQUEST_NULL;
    Inbox::Delivery delivery;
  };
  std::deque<Payload> payloads;  // posted MPI_Irecvs, in envelope order
};

MpiTransport::MpiTransport(const ConnectOptions& options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (options.only_connecting_thread_calls) calling_thread_ = std::this_thread::get_id();
  if (!initialized) {
    // SINGLE although other threads of ours run (never inside MPI): the
    // standard's level for that is FUNNELED, but OpenMPI takes its locks for
    // every level above SINGLE; SINGLE is what MPI_Init gives every program
    // there, threads or not.
    const int wanted = options.only_connecting_thread_calls ? MPI_THREAD_SINGLE : MPI_THREAD_SERIALIZED;
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, wanted, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
    if (provided < wanted)
      throw Error(fmt::format(
          "mpi: the MPI library gives thread level {}, the communicator needs MPI_THREAD_SERIALIZED", provided));
  }
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  check(MPI_Comm_dup(MPI_COMM_WORLD, &groups_parent_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(groups_parent_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  if ((options.rank >= 0 && options.rank != rank_) || (options.size >= 0 && options.size != size_))
    throw Error(fmt::format("mpi: --rank {} / --size {} disagree with mpirun's rank {} of {}", options.rank,
                            options.size, rank_, size_));
  MPI_Comm node = MPI_COMM_NULL;
  int ranks_on_host = size_;
  if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &ranks_on_host);
    MPI_Comm_free(&node);
  }
  wait_rule_ = WaitRule(ranks_on_host, options.timeouts.spin);
  check(MPI_Op_create(&sum16<DType::F16>, 1, &sum_f16_), "MPI_Op_create");
  check(MPI_Op_create(&sum16<DType::BF16>, 1, &sum_bf16_), "MPI_Op_create");
  for (int p = 0; p < size_; ++p) peers_.push_back(std::make_unique<Peer>(describe_peer(p)));
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& peer : peers_)
    for (auto& pl : peer->payloads)
      if (pl.req != MPI_REQUEST_NULL) {
        MPI_Cancel(&pl.req);
        MPI_Request_free(&pl.req);
      }
  for (auto& [context, c] : group_comms_) MPI_Comm_free(&c);
  for (MPI_Op* o : {&sum_f16_, &sum_bf16_})
    if (*o != MPI_OP_NULL) MPI_Op_free(o);
  if (!failed_)
    for (MPI_Comm* c : {&groups_parent_, &comm_})
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

std::string MpiTransport::describe_peer(int peer) const { return "rank " + std::to_string(peer) + " (mpi)"; }

void MpiTransport::throw_if_failed() const {
  if (failed_) throw Error(*failed_);
  if (calling_thread_ != std::thread::id() && std::this_thread::get_id() != calling_thread_)
    throw Error("mpi: called from a thread other than the one that connected (only_connecting_thread_calls)");
}

void MpiTransport::abort(const std::string& reason) noexcept {
  // MPI has no way to tell one peer without killing the job; they time out.
  if (!failed_) failed_ = reason;
}

void MpiTransport::fail_peer(int p, const std::string& what) const {
  throw Error(fmt::format("{}: {}", describe_peer(p), what));
}

RequestPtr MpiTransport::isend(int peer, uint64_t tag, const void* data, size_t bytes) {
  throw_if_failed();
  auto r = std::make_shared<SendReq>(peer, tag, true);
  r->size = bytes;
  const auto env = envelope(tag, bytes);
  r->staging.assign(env.begin(), env.end());
  if (bytes <= kInlineMax) {
    r->staging.resize(kEnvelopeBytes + bytes);
    if (bytes) std::memcpy(r->staging.data() + kEnvelopeBytes, data, bytes);
    check(MPI_Isend(r->staging.data(), int(r->staging.size()), MPI_BYTE, peer, kInline, comm_, &r->reqs[0]),
          "MPI_Isend");
  } else {
    if (bytes > size_t(INT_MAX)) fail_peer(peer, fmt::format("message of {} bytes exceeds 2 GiB", bytes));
    check(MPI_Isend(r->staging.data(), int(kEnvelopeBytes), MPI_BYTE, peer, kEnvelope, comm_, &r->reqs[0]),
          "MPI_Isend");
    check(MPI_Isend(data, int(bytes), MPI_BYTE, peer, kPayload, comm_, &r->reqs[1]), "MPI_Isend");
  }
  sends_.push_back(r);
  return r;
}

RequestPtr MpiTransport::irecv(int peer, uint64_t tag, void* data, size_t capacity) {
  throw_if_failed();
  RequestPtr r = peers_.at(size_t(peer))->inbox.post(peer, tag, data, capacity);
  if (!r->done()) progress_in(peer);
  return r;
}

void MpiTransport::post_payload(int p, Inbox::Delivery delivery) {
  Peer& pr = *peers_[size_t(p)];
  Peer::Payload pl{MPI_REQUEST_NULL, std::move(delivery)};
  pr.pending = false;
  check(MPI_Irecv(pl.delivery.data(), int(pl.delivery.len), MPI_BYTE, p, kPayload, comm_, &pl.req), "MPI_Irecv");
  pr.payloads.push_back(std::move(pl));
}

void MpiTransport::progress_in(int p) {
  Peer& pr = *peers_[size_t(p)];
  for (;;) {
    while (!pr.payloads.empty()) {
      int done = 0;
      check(MPI_Test(&pr.payloads.front().req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) break;
      pr.inbox.complete(pr.payloads.front().delivery);
      pr.payloads.pop_front();
    }
    if (pr.pending) {
      Inbox::Delivery d = pr.inbox.arrive(pr.tag, pr.len);
      if (!d) return;  // waits for an irecv or for buffer space
      post_payload(p, std::move(d));
    }
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    check(MPI_Improbe(p, MPI_ANY_TAG, comm_, &flag, &msg, &st), "MPI_Improbe");
    if (!flag) return;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if ((st.MPI_TAG != kInline && st.MPI_TAG != kEnvelope) || size_t(count) < kEnvelopeBytes ||
        (st.MPI_TAG == kEnvelope && size_t(count) != kEnvelopeBytes)) {
      MPI_Mrecv(nullptr, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      fail_peer(p, fmt::format("sent an unexpected MPI message (tag {}, {} bytes)", st.MPI_TAG, count));
    }
    std::vector<std::byte> buf(static_cast<size_t>(count));
    check(MPI_Mrecv(buf.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
    uint64_t len = 0;
    std::memcpy(&pr.tag, buf.data(), 8);
    std::memcpy(&len, buf.data() + 8, 8);
    pr.len = size_t(len);
    if (st.MPI_TAG == kInline) {
      if (len != size_t(count) - kEnvelopeBytes) fail_peer(p, "sent a malformed message envelope");
      // Already in hand: it goes somewhere even over the buffer budget.
      Inbox::Delivery d = pr.inbox.arrive(pr.tag, pr.len, true);
      if (len) std::memcpy(d.data(), buf.data() + kEnvelopeBytes, pr.len);
      pr.inbox.complete(d);
      continue;
    }
    if (len > size_t(INT_MAX)) fail_peer(p, fmt::format("sent a message envelope with length {}", len));
    pr.pending = true;
  }
}

void MpiTransport::progress() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    SendReq& s = **it;
    int done = 0;
    check(MPI_Testall(2, s.reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (!done) {
      ++it;
      continue;
    }
    s.finish(s.size);
    it = sends_.erase(it);
  }
  for (int p = 0; p < size_; ++p)
    if (p != rank_) progress_in(p);
}

bool MpiTransport::test(const RequestPtr& r) {
  throw_if_failed();
  if (!r->done()) {
    try {
      progress();
    } catch (const Error& e) {
      abort(e.what());
      throw;
    }
  }
  return r->done();
}

void MpiTransport::wait_all(std::span<const RequestPtr> requests, Deadline deadline) {
  throw_if_failed();
  const auto start = SteadyClock::now();
  const WaitPolicy policy = wait_rule_.now();
  Poller poller(policy);
  // MPI has no wait with a deadline, and a transfer moves only while both of
  // its ranks are inside MPI calls, so a rank that naps stalls its peers
  // (4 ranks on 2 cores napping with backoff were many times slower than
  // OpenMPI's own all-reduce for 16 KiB). So once the poll
  // phase is over a rank keeps looking, handing its core over with
  // sched_yield() between looks; only when the host has more than two tasks
  // a core (the rule blocks at once) does it also nap, briefly.
  const bool overloaded = policy.spin.count() <= 0 && policy.yield.count() <= 0;
  try {
    for (;;) {
      progress();
      const auto pending =
          std::find_if(requests.begin(), requests.end(), [](const RequestPtr& r) { return !r->done(); });
      if (pending == requests.end()) return;
      const auto now = SteadyClock::now();
      if (now >= deadline) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
        fail_peer((*pending)->peer(), fmt::format("timed out after {} ms ({} tag {})", ms,
                                                  ((*pending)->is_send() ? "send" : "recv"), (*pending)->tag()));
      }
      if (!poller.poll_again()) {
        if (overloaded) std::this_thread::sleep_for(std::chrono::microseconds(50));
        else sched_yield();
      }
    }
  } catch (const Error& e) {
    abort(e.what());
    throw;
  }
}

// The group's own MPI communicator: the world's duplicate, or one made on
// the group's first native collective. Every member makes the same calls in
// the same order, so they all reach MPI_Comm_create_group (collective over
// the members only) at the same point.
MPI_Comm MpiTransport::comm_for(const Group& g) {
  bool world = g.size() == size_;
  for (int i = 0; world && i < g.size(); ++i) world = g.ranks[size_t(i)] == i;
  if (world) return comm_;
  if (auto it = group_comms_.find(g.context); it != group_comms_.end()) return it->second;
  MPI_Group all = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  MPI_Comm made = MPI_COMM_NULL;
  check(MPI_Comm_group(groups_parent_, &all), "MPI_Comm_group");
  const int rc = MPI_Group_incl(all, g.size(), g.ranks.data(), &members);
  MPI_Group_free(&all);
  check(rc, "MPI_Group_incl");
  const int rc2 = MPI_Comm_create_group(groups_parent_, members, int(g.context & 0x7fff), &made);
  MPI_Group_free(&members);
  check(rc2, "MPI_Comm_create_group");
  MPI_Comm_set_errhandler(made, MPI_ERRORS_RETURN);
  group_comms_.emplace(g.context, made);
  return made;
}

bool MpiTransport::all_reduce(const Group& g, void* buf, size_t count, DType dtype, ReduceOp op, Deadline) {
  if (count > size_t(INT_MAX)) return false;
  MPI_Datatype type = MPI_FLOAT;
  MPI_Op mpi_op = op == ReduceOp::Sum ? MPI_SUM : MPI_MAX;
  if (dtype == DType::F16 || dtype == DType::BF16) {
    // Our max picks by operand order on ties (±0), which MPI may swap.
    if (op != ReduceOp::Sum) return false;
    type = MPI_UINT16_T;
    mpi_op = dtype == DType::F16 ? sum_f16_ : sum_bf16_;
  } else if (dtype != DType::F32) {
    return false;
  }
  throw_if_failed();
  check(MPI_Allreduce(MPI_IN_PLACE, buf, int(count), type, mpi_op, comm_for(g)), "MPI_Allreduce");
  return true;
}

bool MpiTransport::all_gather(const Group& g, const void* send, void* recv, size_t bytes_per_rank, Deadline) {
  if (bytes_per_rank > size_t(INT_MAX)) return false;
  throw_if_failed();
  check(MPI_Allgather(send, int(bytes_per_rank), MPI_BYTE, recv, int(bytes_per_rank), MPI_BYTE, comm_for(g)),
        "MPI_Allgather");
  return true;
}

bool MpiTransport::broadcast(const Group& g, void* buf, size_t bytes, int root_index, Deadline) {
  if (bytes > size_t(INT_MAX)) return false;
  throw_if_failed();
  check(MPI_Bcast(buf, int(bytes), MPI_BYTE, root_index, comm_for(g)), "MPI_Bcast");
  return true;
}

bool MpiTransport::barrier(const Group& g, Deadline) {
  throw_if_failed();
  check(MPI_Barrier(comm_for(g)), "MPI_Barrier");
  return true;
}

}  // namespace shardlm::comm::mpi
