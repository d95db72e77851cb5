#include "comm/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "net/sha256.h"
#include "net/socket.h"

namespace shardlm::comm::shm {

constexpr uint64_t kMagic = 0x314d48534d4c5353ull;  // "SSLMSHM1"
constexpr uint32_t kVersion = 1;
constexpr int kMaxWorld = 256;
constexpr const char* kPrefix = "shardlm-";

struct SegmentHeader {
  uint64_t magic;  // stored last (release) by the creator
  uint32_t version;
  uint32_t world;
  uint64_t slot_bytes, queue_bytes, total_bytes;
  uint8_t auth[32];
  uint64_t pidns;
  uint32_t creator_pid;
  uint32_t attached;     // ranks attached so far
  uint32_t failed_rank;  // rank + 1 of the first rank that declared failure
  char failure[128];
};

enum : uint32_t { kAbsent = 0, kPresent = 1, kLeft = 2 };
constexpr uint32_t kClaimed = 0xffffffffu;  // failed_rank while the text is written
struct alignas(64) RankEntry {
  uint32_t pid;
  uint32_t state;
};

namespace {

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// What proves a segment belongs to this cluster (its id and token).
net::Sha256Digest auth_digest(const SegmentConfig& config) {
  return net::sha256("shardlm-shm-auth\n" + config.cluster_id + '\n' + config.token);
}

uint64_t read_pidns() {
  char buf[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  if (n <= 0) return 0;
  const char* open = std::strchr(buf, '[');
  return open ? std::strtoull(open + 1, nullptr, 10) : 0;
}

uint64_t own_pidns() {
  static const uint64_t ns = read_pidns();
  return ns;
}

// A zombie still answers kill(pid, 0); a killed rank whose parent has not
// reaped it yet is dead for our purposes.
bool pid_alive(uint32_t pid) {
  if (pid == 0) return false;
  if (kill(pid_t(pid), 0) != 0 && errno == ESRCH) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%u/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return true;  // no procfs: trust kill()
  char buf[512] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close = static_cast<const char*>(memrchr(buf, ')', n));
  if (!close || close + 2 >= buf + n) return true;
  return close[2] != 'Z' && close[2] != 'X';
}

template <class T>
std::atomic_ref<T> atomic(T& v) { return std::atomic_ref<T>(v); }

struct Layout {
  size_t ranks, steps, doorbells, queues_ctl, slots, result, queue_data, total;
};

Layout layout(int world, size_t slot_bytes, size_t queue_bytes) {
  Layout l{};
  const size_t w = size_t(world);
  l.ranks = align_up(sizeof(SegmentHeader), 64);
  l.steps = l.ranks + w * sizeof(RankEntry);
  l.doorbells = l.steps + w * sizeof(SeqWord);
  l.queues_ctl = l.doorbells + w * sizeof(SeqWord);
  l.slots = align_up(l.queues_ctl + w * w * sizeof(ByteQueueCtl), 4096);
  l.result = l.slots + w * 2 * slot_bytes;
  l.queue_data = l.result + 2 * slot_bytes;
  l.total = l.queue_data + w * w * queue_bytes;
  return l;
}

// Opens an existing segment read-only far enough to read its header; returns
// false when it is not (yet) a complete segment.
bool peek_header(int fd, SegmentHeader& out) {
  struct stat st{};
  if (fstat(fd, &st) != 0 || size_t(st.st_size) < sizeof(SegmentHeader)) return false;
  void* p = mmap(nullptr, sizeof(SegmentHeader), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  auto* h = static_cast<SegmentHeader*>(p);
  const bool ok = atomic(h->magic).load(std::memory_order_acquire) == kMagic;
  if (ok) std::memcpy(&out, h, sizeof out);
  munmap(p, sizeof(SegmentHeader));
  return ok;
}

}  // namespace

std::string segment_name(const std::string& cluster_id, const std::string& token) {
  const net::Sha256Digest digest = net::sha256("shardlm-shm-name\n" + cluster_id + '\n' + token);
  std::string name = std::string("/") + kPrefix;
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    name += hex[digest[i] >> 4];
    name += hex[digest[i] & 15];
  }
  return name;
}

int sweep_stale_segments() {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return 0;
  const uint64_t ns = own_pidns();
  int swept = 0;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, kPrefix, std::strlen(kPrefix)) != 0) continue;
    const std::string name = std::string("/") + e->d_name;
    const int fd = shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    SegmentHeader h{};
    const bool complete = peek_header(fd, h);
    close(fd);
    // Only judge segments from our pid namespace: elsewhere pids mean nothing.
    if (complete && h.pidns == ns && !pid_alive(h.creator_pid) && shm_unlink(name.c_str()) == 0) ++swept;
  }
  closedir(dir);
  return swept;
}

Segment::Segment(const SegmentConfig& config)
    : name_(segment_name(config.cluster_id, config.token)),
      rank_(config.rank),
      world_(config.world),
      slot_bytes_(config.slot_bytes),
      queue_bytes_(config.queue_bytes) {
  if (world_ < 1 || world_ > kMaxWorld || rank_ < 0 || rank_ >= world_)
    throw Error(fmt::format("shm: rank {} of world {} is out of range (1..{} ranks)", rank_, world_, kMaxWorld));
  if (slot_bytes_ < 4096 || slot_bytes_ % 64 != 0)
    throw Error(fmt::format("shm: slot size {} must be a multiple of 64, at least 4096", slot_bytes_));
  if (queue_bytes_ < 4096 || (queue_bytes_ & (queue_bytes_ - 1)) != 0 || queue_bytes_ > (size_t(1) << 30))
    throw Error(fmt::format("shm: queue size {} must be a power of two in 4 KiB..1 GiB", queue_bytes_));
  wait_rule_ = WaitRule(world_, config.spin);
  if (rank_ == 0)
    create(config);
  else
    attach(config);
}

Segment::~Segment() {
  if (!base_) return;
  atomic(ranks_[rank_].state).store(kLeft, std::memory_order_release);
  munmap(base_, total_bytes_);
}

void Segment::map(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const std::string why = net::errno_text(errno);
    close(fd);
    throw Error(fmt::format("shm: mmap of {} ({} bytes) failed: {}", name_, bytes, why));
  }
  close(fd);
  base_ = static_cast<std::byte*>(p);
  total_bytes_ = bytes;
  header_ = reinterpret_cast<SegmentHeader*>(base_);
  const Layout l = layout(world_, slot_bytes_, queue_bytes_);
  ranks_ = reinterpret_cast<RankEntry*>(base_ + l.ranks);
  off_steps_ = l.steps;
  off_doorbells_ = l.doorbells;
  off_queues_ctl_ = l.queues_ctl;
  off_slots_ = l.slots;
  off_result_ = l.result;
  off_queue_data_ = l.queue_data;
}

void Segment::create(const SegmentConfig& config) {
  const auto deadline = SteadyClock::now() + config.attach_timeout;
  sweep_stale_segments();
  const Layout l = layout(world_, slot_bytes_, queue_bytes_);
  int fd = -1;
  for (;;) {
    fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) break;
    if (errno != EEXIST) throw Error(fmt::format("shm: cannot create {}: {}", name_, net::errno_text(errno)));
    // Same cluster id and token: a leftover from a crash, or a live cluster
    // still bootstrapping (it unlinks the name once all its ranks attached).
    if (const int old = shm_open(name_.c_str(), O_RDONLY, 0); old >= 0) {
      SegmentHeader h{};
      const bool complete = peek_header(old, h);
      close(old);
      if (complete && !pid_alive(h.creator_pid)) {
        shm_unlink(name_.c_str());
        continue;
      }
    }
    if (SteadyClock::now() >= deadline)
      throw Error(fmt::format("shm: segment {} is held by another live cluster with the same id and token", name_));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (ftruncate(fd, off_t(l.total)) != 0) {
    const std::string why = net::errno_text(errno);
    close(fd);
    shm_unlink(name_.c_str());
    throw Error(fmt::format("shm: cannot size {} to {} bytes: {}", name_, l.total, why));
  }
  try {
    map(fd, l.total);
  } catch (...) {
    shm_unlink(name_.c_str());
    throw;
  }
  header_->version = kVersion;
  header_->world = uint32_t(world_);
  header_->slot_bytes = slot_bytes_;
  header_->queue_bytes = queue_bytes_;
  header_->total_bytes = l.total;
  const net::Sha256Digest auth = auth_digest(config);
  std::memcpy(header_->auth, auth.data(), auth.size());
  header_->pidns = own_pidns();
  header_->creator_pid = uint32_t(getpid());
  ranks_[0].pid = uint32_t(getpid());
  ranks_[0].state = kPresent;
  header_->attached = 1;
  atomic(header_->magic).store(kMagic, std::memory_order_release);
  try {
    wait_all_attached(deadline);
  } catch (...) {
    shm_unlink(name_.c_str());
    throw;
  }
  shm_unlink(name_.c_str());
}

void Segment::attach(const SegmentConfig& config) {
  const auto deadline = SteadyClock::now() + config.attach_timeout;
  const net::Sha256Digest auth = auth_digest(config);
  for (;; std::this_thread::sleep_for(std::chrono::milliseconds(2))) {
    if (SteadyClock::now() >= deadline)
      throw Error(fmt::format("shm: rank {} found no segment {} from rank 0 within {} ms", rank_, name_,
                              config.attach_timeout.count()));
    const int fd = shm_open(name_.c_str(), O_RDWR, 0);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      throw Error(fmt::format("shm: cannot open {}: {}", name_, net::errno_text(errno)));
    }
    SegmentHeader h{};
    if (!peek_header(fd, h) || !pid_alive(h.creator_pid)) {  // not ready yet, or stale
      close(fd);
      continue;
    }
    if (h.version != kVersion || std::memcmp(h.auth, auth.data(), auth.size()) != 0) {
      close(fd);
      throw Error(fmt::format("shm: segment {} does not match this cluster id/token (version {})", name_, h.version));
    }
    if (h.world != uint32_t(world_) || h.slot_bytes != slot_bytes_ || h.queue_bytes != queue_bytes_) {
      close(fd);
      throw Error(
          fmt::format("shm: segment {} has world {}, slot {}, queue {} but rank {} expects world {}, slot {}, queue {}",
                      name_, h.world, h.slot_bytes, h.queue_bytes, rank_, world_, slot_bytes_, queue_bytes_));
    }
    map(fd, h.total_bytes);
    break;
  }
  RankEntry& me = ranks_[rank_];
  uint32_t expected = kAbsent;
  if (!atomic(me.state).compare_exchange_strong(expected, kPresent, std::memory_order_acq_rel)) {
    munmap(base_, total_bytes_);
    base_ = nullptr;
    throw Error(fmt::format("shm: rank {} is already attached to {}", rank_, name_));
  }
  atomic(me.pid).store(uint32_t(getpid()), std::memory_order_release);
  atomic(header_->attached).fetch_add(1, std::memory_order_acq_rel);
  wait_all_attached(deadline);
}

void Segment::wait_all_attached(Deadline deadline) const {
  while (atomic(header_->attached).load(std::memory_order_acquire) < uint32_t(world_)) {
    if (SteadyClock::now() >= deadline) {
      std::string missing;
      for (int r = 0; r < world_; ++r)
        if (atomic(ranks_[r].state).load(std::memory_order_acquire) == kAbsent) {
          if (!missing.empty()) missing += ',';
          missing += std::to_string(r);
        }
      throw Error(fmt::format("shm: rank(s) {} did not attach to {} in time", missing, name_));
    }
    if (rank_ != 0) check_peer(0);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

SeqWord& Segment::step_word(int rank) const {
  return reinterpret_cast<SeqWord*>(base_ + off_steps_)[rank];
}
uint32_t Segment::pid_of(int rank) const {
  return atomic(ranks_[rank].pid).load(std::memory_order_acquire);
}

SeqWord& Segment::doorbell(int rank) const {
  return reinterpret_cast<SeqWord*>(base_ + off_doorbells_)[rank];
}
void Segment::ring_doorbell(int rank) const {
  SeqWord& w = doorbell(rank);
  std::atomic_ref<uint32_t>(w.seq).fetch_add(1, std::memory_order_seq_cst);
  wake_sleepers(w);
}
std::byte* Segment::slot(int rank, int parity) const {
  return base_ + off_slots_ + (size_t(rank) * 2 + size_t(parity)) * slot_bytes_;
}
std::byte* Segment::result(int parity) const { return base_ + off_result_ + size_t(parity) * slot_bytes_; }
ByteQueueCtl& Segment::queue_ctl(int from, int to) const {
  return reinterpret_cast<ByteQueueCtl*>(base_ + off_queues_ctl_)[size_t(from) * size_t(world_) + size_t(to)];
}
std::byte* Segment::queue_data(int from, int to) const {
  return base_ + off_queue_data_ + (size_t(from) * size_t(world_) + size_t(to)) * queue_bytes_;
}

void Segment::check_peer(int peer) const {
  if (const uint32_t failed = atomic(header_->failed_rank).load(std::memory_order_acquire);
      failed != 0 && failed != kClaimed) {
    char why[sizeof header_->failure + 1] = {};
    std::memcpy(why, header_->failure, sizeof header_->failure);
    throw Error(fmt::format("shm: rank {} failed: {}", failed - 1, why));
  }
  const RankEntry& e = ranks_[peer];
  const uint32_t state = atomic(const_cast<uint32_t&>(e.state)).load(std::memory_order_acquire);
  if (state == kLeft) throw Error(fmt::format("shm: rank {} left the cluster", peer));
  const uint32_t pid = atomic(const_cast<uint32_t&>(e.pid)).load(std::memory_order_acquire);
  if (state == kPresent && header_->pidns == own_pidns() && !pid_alive(pid))
    throw Error(fmt::format("shm: rank {} (pid {}) died", peer, pid));
}

void Segment::declare_failed(const std::string& why) const {
  // Claim, write the text, then publish the rank: readers never see a torn
  // message, and only the first failure is recorded.
  uint32_t expected = 0;
  if (!atomic(header_->failed_rank).compare_exchange_strong(expected, kClaimed)) return;
  std::memset(header_->failure, 0, sizeof header_->failure);
  std::memcpy(header_->failure, why.data(), std::min(why.size(), sizeof header_->failure - 1));
  atomic(header_->failed_rank).store(uint32_t(rank_ + 1), std::memory_order_release);
}

WaitSpec Segment::wait_spec(int peer, Deadline deadline, std::string what) const {
  WaitSpec s;
  s.policy = wait_rule_.now();
  s.deadline = deadline;
  s.check = [this, peer] { check_peer(peer); };
  s.describe = [peer, what = std::move(what)] { return "rank " + std::to_string(peer) + " (" + what + ")"; };
  return s;
}

}  // namespace shardlm::comm::shm
