// The POSIX shared-memory segment that ranks on one host exchange through.
//
// Layout (offsets fixed by the creator, validated by every attacher):
//   header | per-rank entries (pid, state) | per-rank step words |
//   per-pair queue control | collective slots [rank][parity] | result [parity] |
//   queue data [from][to]
// The name is "/shardlm-" + a hash of cluster id and token, mode 0600. Rank 0
// creates it; the others open it with retries. It is unlinked as soon as all
// ranks are attached, so the memory goes away with the last rank however it
// dies; a segment left by a crash during bootstrap is swept by the next creator.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/shm/byte_queue.h"
#include "comm/shm/seq_wait.h"

namespace shardlm::comm::shm {

struct SegmentConfig {
  std::string cluster_id;
  std::string token;
  int rank = 0;
  int world = 1;
  size_t slot_bytes = size_t(1) << 20;   // collective staging per rank and parity
  size_t queue_bytes = size_t(256) << 10;  // per ordered pair; power of two
  std::chrono::milliseconds attach_timeout{10'000};
  // Timeouts::spin: < 0 lets comm/wait_policy.h choose (world, cores, load).
  std::chrono::microseconds spin{-1};
};

// "/shardlm-<32 hex digits>", as passed to shm_open.
std::string segment_name(const std::string& cluster_id, const std::string& token);

// Unlinks segments of ours whose creator process is gone; returns how many.
int sweep_stale_segments();

struct SegmentHeader;
struct RankEntry;

class Segment {
 public:
  explicit Segment(const SegmentConfig& config);  // create (rank 0) or attach
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t queue_bytes() const { return queue_bytes_; }
  const std::string& name() const { return name_; }
  uint32_t pid_of(int rank) const;

  SeqWord& step_word(int rank) const;
  // Bumped whenever a queue towards `rank` got data or a queue from it got
  // space, so a rank with many pending messages sleeps on one word.
  SeqWord& doorbell(int rank) const;
  void ring_doorbell(int rank) const;
  std::byte* slot(int rank, int parity) const;
  std::byte* result(int parity) const;
  ByteQueueCtl& queue_ctl(int from, int to) const;
  std::byte* queue_data(int from, int to) const;

  // Throws shardlm::Error naming `peer` if it died, left, or some rank
  // declared the cluster failed.
  void check_peer(int peer) const;
  // Marks the cluster failed so that peers waiting on us stop at once.
  void declare_failed(const std::string& why) const;
  // Wait parameters for waiting on `peer` until `deadline`.
  WaitSpec wait_spec(int peer, Deadline deadline, std::string what) const;

 private:
  void create(const SegmentConfig& config);
  void attach(const SegmentConfig& config);
  void map(int fd, size_t bytes);
  void wait_all_attached(Deadline deadline) const;

  std::string name_;
  int rank_ = 0, world_ = 1;
  size_t slot_bytes_ = 0, queue_bytes_ = 0, total_bytes_ = 0;
  std::byte* base_ = nullptr;
  SegmentHeader* header_ = nullptr;
  RankEntry* ranks_ = nullptr;
  size_t off_steps_ = 0, off_doorbells_ = 0, off_queues_ctl_ = 0, off_slots_ = 0, off_result_ = 0, off_queue_data_ = 0;
  WaitRule wait_rule_;
};

}  // namespace shardlm::comm::shm
