#include "core/row_shares.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace shardlm {
namespace {

// Rows [r0, r1) of every chunk one thread got, in the order it got them.
std::vector<std::pair<int64_t, int64_t>> drain(RowShares& shares, int ith) {
  std::vector<std::pair<int64_t, int64_t>> got;
  for (int64_t r0, r1; shares.next(ith, &r0, &r1);) got.emplace_back(r0, r1);
  return got;
}

TEST(RowShares, AThreadAloneTakesItsShareInOrderThenTheOthersFromTheBack) {
  RowShares shares(100, 16, 2);  // 7 chunks: thread 0 owns 0-2, thread 1 owns 3-6
  const auto got = drain(shares, 0);
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 16},  {16, 32}, {32, 48}, {96, 100},
                                                         {80, 96}, {64, 80}, {48, 64}};
  EXPECT_EQ(got, want);
  int64_t r0 = 0, r1 = 0;
  EXPECT_FALSE(shares.next(1, &r0, &r1));
}

TEST(RowShares, EveryRowGoesToExactlyOneThreadWhateverTheRace) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t rows : {1, 15, 16, 17, 1000, 4096}) {
      for (int round = 0; round < 50; ++round) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(rows));
        RowShares shares(rows, 32, threads);
        pool.run([&](int ith, int) {
          for (const auto& [r0, r1] : drain(shares, ith)) {
            EXPECT_EQ(0, r0 % 32);
            for (int64_t r = r0; r < r1; ++r) seen[size_t(r)].fetch_add(1);
          }
        });
        for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(1, seen[size_t(r)].load()) << rows << " rows, row " << r;
      }
    }
  }
}

// share() is where a thread that claims first starts, and the shares tile
// the rows in thread order.
TEST(RowShares, ShareIsWhereEachThreadStartsAndTheSharesTileTheRows) {
  for (int threads : {1, 2, 3, 5}) {
    for (int64_t rows : {0, 1, 15, 100, 1000}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(rows) + " rows");
      int64_t tiled = 0;
      for (int i = 0; i < threads; ++i) {
        const auto [first, end] = RowShares::share(rows, 16, threads, i);
        EXPECT_EQ(first, tiled);
        EXPECT_LE(first, end);
        tiled = end;
        RowShares shares(rows, 16, threads);
        int64_t r0 = -1, r1 = -1;
        if (first < end) {
          ASSERT_TRUE(shares.next(i, &r0, &r1));
          EXPECT_EQ(r0, first);
        }
      }
      EXPECT_EQ(tiled, rows);
    }
  }
}

TEST(RowShares, NoRowsNoChunks) {
  RowShares shares(0, 16, 2);
  int64_t r0 = 0, r1 = 0;
  EXPECT_FALSE(shares.next(0, &r0, &r1));
  EXPECT_FALSE(shares.next(1, &r0, &r1));
}

}  // namespace
}  // namespace shardlm
