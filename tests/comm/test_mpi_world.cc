// The MPI backend under mpirun (-np 1..4, registered in CMakeLists.txt; this
// file is a .cc so that the module's *.cpp glob leaves it out of test_comm).
// Every rank runs the same tests; MPI is initialised by the transport.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <thread>

#include "comm/mpi/mpi_transport.h"
#include "comm/test_shm_helpers.h"
#include "core/error.h"

namespace shardlm::comm {
namespace {

std::shared_ptr<Communicator> mpi_world(bool fast_paths) {
  ConnectOptions o;
  o.backend = "mpi";
  o.timeouts.op = std::chrono::milliseconds(20'000);
  CommConfig config;
  config.timeouts = o.timeouts;
  config.allow_fast_paths = fast_paths;
  return Communicator::create(std::make_unique<mpi::MpiTransport>(o), config);
}

TEST(MpiTransport, WorldComesFromMpirun) {
  auto comm = mpi_world(true);
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->size(), size);
  EXPECT_EQ(comm->backend(), "mpi");
}

TEST(MpiTransport, EveryCollectiveOverMpiLinks) {
  auto comm = mpi_world(false);
  testing::check_all_collectives(*comm, {0, 1, 1237, (size_t(300) << 10) + 3});
  comm->barrier();
}

TEST(MpiTransport, EveryCollectiveNative) {
  auto comm = mpi_world(true);
  testing::check_all_collectives(*comm, {0, 1, 1237, (size_t(300) << 10) + 3});
  comm->barrier();
}

// Odd and even ranks: each group gets its own MPI communicator.
TEST(MpiTransport, SplitGroupsUseMpiCollectivesToo) {
  auto comm = mpi_world(true);
  auto half = comm->split(comm->rank() % 2, comm->rank());
  ASSERT_TRUE(half);
  testing::check_all_collectives(*half, {0, 1, 1237, (size_t(300) << 10) + 3});
  half->barrier();
  comm->barrier();
}

TEST(MpiTransport, NativeAllReduceMatches) {
  auto comm = mpi_world(true);
  ASSERT_EQ(comm->choose_all_reduce(4 << 20), AllReduceAlgo::Native);
  std::vector<float> buf(5000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = testing::input_value(comm->rank(), i);
  comm->all_reduce(buf.data(), buf.size(), DType::F32);
  for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], testing::expected(comm->size(), i, ReduceOp::Sum)) << i;
}

// Inexact sums (magnitudes over many decades): every rank must still hold the
// same bits, at sizes where OpenMPI picks different algorithms, and the same
// input must give the same bits on every call (what mpi_transport.h documents:
// OpenMPI's choice is a function of size and process count only).
TEST(MpiTransport, NativeAllReduceGivesEveryRankTheSameBits) {
  auto comm = mpi_world(true);
  for (size_t count : {size_t(3), size_t(1000), size_t(70'001), size_t(600'000)}) {
    std::vector<float> input(count);
    for (size_t i = 0; i < count; ++i)
      input[i] = float(((i * 2654435761u + unsigned(comm->rank()) * 40503u) % 2001) - 1000) *
                 float(1 << (i % 24)) * 1e-3f;
    std::vector<float> buf(input);
    comm->all_reduce(buf.data(), count, DType::F32);
    std::vector<float> rank0(buf);
    comm->broadcast(rank0.data(), count * sizeof(float), 0);
    ASSERT_EQ(std::memcmp(rank0.data(), buf.data(), count * sizeof(float)), 0) << count;
    for (int again = 0; again < 2; ++again) {
      std::vector<float> repeat(input);
      comm->all_reduce(repeat.data(), count, DType::F32);
      ASSERT_EQ(std::memcmp(repeat.data(), buf.data(), count * sizeof(float)), 0) << count << " call " << again;
    }
  }
  for (DType t : {DType::F16, DType::BF16}) {  // MPI_UINT16_T with our sum
    const size_t count = 70'001;
    std::vector<uint16_t> buf(count);
    for (size_t i = 0; i < count; ++i)
      buf[i] = testing::encode16(t, float(((i * 2654435761u + unsigned(comm->rank()) * 40503u) % 2001) - 1000) *
                                        float(1 << (i % 12)) * 1e-3f);
    comm->all_reduce(buf.data(), count, t);
    std::vector<uint16_t> rank0(buf);
    comm->broadcast(rank0.data(), count * 2, 0);
    ASSERT_EQ(rank0, buf) << dtype_name(t);
  }
}

TEST(MpiTransport, TagsMatchOutOfOrderAndBigMessagesCross) {
  auto comm = mpi_world(true);
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 ranks (mpirun -np 2)";
  if (comm->rank() > 1) return;
  const int peer = 1 - comm->rank();
  const size_t big = (size_t(3) << 20) + 5;
  std::vector<uint8_t> out(big), in(big);
  std::iota(out.begin(), out.end(), uint8_t(comm->rank()));
  if (comm->rank() == 0) {
    comm->send(peer, 9, out.data(), big);
    comm->recv(peer, 9, in.data(), big);
  } else {
    comm->recv(peer, 9, in.data(), big);
    comm->send(peer, 9, out.data(), big);
  }
  std::vector<uint8_t> want(big);
  std::iota(want.begin(), want.end(), uint8_t(peer));
  ASSERT_EQ(in, want);
  if (comm->rank() == 0) {
    std::vector<int> a(10'000, 55);  // an envelope + payload message
    int b = 66;
    comm->send(1, 5, a.data(), a.size() * sizeof(int));
    comm->send(1, 6, &b, sizeof b);
  } else {
    std::vector<int> a(10'000);
    int b = 0;
    EXPECT_EQ(comm->recv(0, 6, &b, sizeof b), sizeof b);  // 5 is buffered meanwhile
    EXPECT_EQ(comm->recv(0, 5, a.data(), a.size() * sizeof(int)), a.size() * sizeof(int));
    EXPECT_EQ(b, 66);
    EXPECT_EQ(a.back(), 55);
  }
}

// The promise behind MPI_THREAD_SINGLE is checked: the connecting thread
// gets through, another thread gets an Error before it reaches MPI (on
// every rank alike, so no rank waits in a collective).
TEST(MpiTransport, OnlyTheConnectingThreadMayCallWhenPromised) {
  ConnectOptions o;
  o.backend = "mpi";
  o.timeouts.op = std::chrono::milliseconds(20'000);
  o.only_connecting_thread_calls = true;
  CommConfig config;
  config.timeouts = o.timeouts;
  auto comm = Communicator::create(std::make_unique<mpi::MpiTransport>(o), config);
  float x = 1.0f;
  comm->all_reduce(&x, 1, DType::F32);
  EXPECT_EQ(x, float(comm->size()));
  if (comm->size() < 2) GTEST_SKIP() << "one rank never enters MPI (mpirun -np 2)";
  bool threw = false;
  std::string what;
  std::thread other([&] {
    try {
      comm->all_reduce(&x, 1, DType::F32);
    } catch (const Error& e) {
      threw = true;
      what = e.what();
    }
  });
  other.join();
  EXPECT_TRUE(threw);
  EXPECT_NE(what.find("thread"), std::string::npos) << what;
  EXPECT_EQ(x, float(comm->size()));  // untouched
}

TEST(MpiTransport, MismatchedRankIsAnError) {
  ConnectOptions o;
  o.backend = "mpi";
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  o.size = size + 1;
  EXPECT_THROW(mpi::MpiTransport t(o), Error);
}

}  // namespace
}  // namespace shardlm::comm
