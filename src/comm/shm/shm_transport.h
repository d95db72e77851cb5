// The shared-memory backend: ranks of one host exchange through one segment
// (segment.h). Point-to-point messages travel through per-pair SPSC byte queues
// framed as {tag, length, payload}; collectives of the world group take the
// slot-based fast paths of slot_collectives.h.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/shm/slot_collectives.h"
#include "comm/shm/segment.h"
#include "comm/transport.h"

namespace shardlm::comm::shm {

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const ConnectOptions& options);
  ~ShmTransport() override;

  std::string_view backend() const override { return "shm"; }
  int rank() const override { return segment_.rank(); }
  int size() const override { return segment_.world(); }
  std::string describe_peer(int peer) const override;

  RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int peer, uint64_t tag, void* data, size_t capacity) override;
  bool test(const RequestPtr& r) override;
  void wait_all(std::span<const RequestPtr> requests, Deadline deadline) override;
  void abort(const std::string& reason) noexcept override;

  bool all_reduce(const Group& g, void* buf, size_t count, DType dtype, ReduceOp op, Deadline deadline) override;
  bool all_gather(const Group& g, const void* send, void* recv, size_t bytes_per_rank, Deadline deadline) override;
  bool reduce_scatter(const Group& g, const void* send, void* recv, size_t count_per_rank, DType dtype,
                      ReduceOp op, Deadline deadline) override;
  bool broadcast(const Group& g, void* buf, size_t bytes, int root_index, Deadline deadline) override;
  bool barrier(const Group& g, Deadline deadline) override;

 private:
  struct SendReq;
  struct Peer;

  bool is_world(const Group& g) const;
  void throw_if_failed() const;
  template <class F>
  bool guarded(F&& f);
  bool progress();  // one non-blocking pass over every peer; true if bytes moved
  bool progress_out(int p);
  bool progress_in(int p);
  void start_message(int p);
  void finish_message(int p);
  void fail_peer(int p, const std::string& what);

  Segment segment_;
  Collectives collectives_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::optional<std::string> failed_;
};

}  // namespace shardlm::comm::shm
