// Running a small shm world inside one test: ranks as threads (each with its
// own mapping of the segment) or as forked processes (for crash tests).
#pragma once

#include <unistd.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include <gtest/gtest.h>

#include <cstring>

#include "comm/reduce.h"
#include "comm/transport.h"

namespace shardlm::comm::testing {

// A session name no other test (or concurrent test binary) uses.
inline std::string unique_session(const std::string& what) {
  static std::atomic<int> counter{0};
  return what + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

inline ConnectOptions shm_options(const std::string& session, int rank, int size) {
  ConnectOptions o;
  o.backend = "shm";
  o.rank = rank;
  o.size = size;
  o.coordinator = session;
  o.token = "test-token";
  o.cluster_id = "shm-tests";
  o.timeouts.op = std::chrono::milliseconds(20'000);
  o.timeouts.connect = std::chrono::milliseconds(10'000);
  return o;
}

inline std::shared_ptr<Communicator> shm_world(const ConnectOptions& o, CommConfig config) {
  config.timeouts = o.timeouts;
  return Communicator::create(connect_transport(o), config);
}

// Runs body(rank) on `size` threads; rethrows the first failure after all end.
inline void run_ranks(int size, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Small integers are exact in all three dtypes, so expected sums are exact.
inline float input_value(int rank, size_t i) { return float((rank + 1) * int(i % 7 + 1)) - 3.0f; }

inline uint16_t encode16(DType t, float v) { return t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v); }
inline float decode(DType t, const std::vector<std::byte>& buf, size_t i) { return load_elem(buf.data(), t, i); }

inline std::vector<std::byte> make_input(DType t, int rank, size_t count, size_t offset = 0) {
  std::vector<std::byte> buf(count * reduce_elem_bytes(t));
  for (size_t i = 0; i < count; ++i) store_elem(buf.data(), t, i, input_value(rank, offset + i));
  return buf;
}

inline float expected(int world, size_t i, ReduceOp op) {
  float acc = input_value(0, i);
  for (int r = 1; r < world; ++r) acc = op == ReduceOp::Sum ? acc + input_value(r, i) : std::max(acc, input_value(r, i));
  return acc;
}

// Runs every collective for f32/f16/bf16 and the given counts on `comm`
// (all ranks call it); the first mismatch fails with the op, dtype and size.
inline void check_all_collectives(Communicator& c, const std::vector<size_t>& counts) {
  Communicator* comm = &c;
  const int world = c.size(), rank = c.rank();
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      const size_t eb = reduce_elem_bytes(t);
      for (size_t count : counts) {
        const std::string where = std::string(dtype_name(t)) + " count " + std::to_string(count);
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
          auto buf = make_input(t, rank, count);
          comm->all_reduce(buf.data(), count, t, op);
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(decode(t, buf, i), expected(world, i, op)) << "all_reduce " << where << " at " << i;
        }
        {  // reduce_scatter: block b of rank r holds input_value(r, b*count + i)
          auto send = make_input(t, rank, count * size_t(world));
          std::vector<std::byte> recv(count * eb);
          comm->reduce_scatter(send.data(), recv.data(), count, t);
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(decode(t, recv, i), expected(world, size_t(rank) * count + i, ReduceOp::Sum))
                << "reduce_scatter " << where << " at " << i;
        }
        const size_t bytes = count * eb;
        {
          auto send = make_input(t, rank, count);
          std::vector<std::byte> recv(bytes * size_t(world));
          comm->all_gather(send.data(), recv.data(), bytes);
          for (int q = 0; q < world && bytes > 0; ++q)  // memcmp of empty (null) buffers is UB
            ASSERT_EQ(0, std::memcmp(recv.data() + size_t(q) * bytes, make_input(t, q, count).data(), bytes))
                << "all_gather " << where << " block " << q;
        }
        for (int root = 0; root < world; ++root) {
          auto buf = rank == root ? make_input(t, root, count) : std::vector<std::byte>(bytes);
          comm->broadcast(buf.data(), bytes, root);
          ASSERT_EQ(buf, make_input(t, root, count)) << "broadcast " << where << " root " << root;
        }
      }
    }
}

}  // namespace shardlm::comm::testing
