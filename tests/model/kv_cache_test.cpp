// The KV cache is head-major: one head's rows of consecutive positions are
// adjacent (what the attention kernels stream), for f32 and f16, with and
// without values stored in the keys.
#include <gtest/gtest.h>

#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/memory_usage.h"
#include "model/kv_cache.h"

namespace shardlm {
namespace {

// Element i of head h at (layer, seq, pos): a value exact in f16.
float value_at(int64_t layer, int64_t seq, int64_t pos, int64_t h, int64_t i, bool is_v) {
  return float(((layer * 3 + seq) * 8 + pos) * 16 + h * 4 + i) * (is_v ? -0.5f : 0.5f);
}

float element(const void* rows, int64_t i, DType type) {
  return type == DType::F32 ? static_cast<const float*>(rows)[i] : f16_to_f32(static_cast<const f16_t*>(rows)[i]);
}

TEST(KvCache, RowsOfOneHeadAreContiguousByPosition) {
  const int64_t n_layer = 2, n_seq = 3, n_ctx = 8, n_head = 3, dim_k = 4, dim_v = 2;
  for (const DType type : {DType::F32, DType::F16}) {
    KvCache cache(n_layer, n_seq, n_ctx, n_head, dim_k, dim_v, type);
    EXPECT_EQ(cache.k_stride(), dim_k);
    EXPECT_EQ(cache.v_stride(), dim_v);
    std::vector<float> k(size_t(n_head * dim_k)), v(size_t(n_head * dim_v));
    for (int64_t l = 0; l < n_layer; ++l)
      for (int64_t s = 0; s < n_seq; ++s)
        for (int64_t p = 0; p < n_ctx; ++p) {
          for (int64_t h = 0; h < n_head; ++h) {
            for (int64_t i = 0; i < dim_k; ++i) k[size_t(h * dim_k + i)] = value_at(l, s, p, h, i, false);
            for (int64_t i = 0; i < dim_v; ++i) v[size_t(h * dim_v + i)] = value_at(l, s, p, h, i, true);
          }
          cache.store(l, s, p, k.data(), v.data());
        }
    for (int64_t l = 0; l < n_layer; ++l)
      for (int64_t s = 0; s < n_seq; ++s)
        for (int64_t h = 0; h < n_head; ++h)
          for (int64_t p = 0; p < n_ctx; ++p) {
            for (int64_t i = 0; i < dim_k; ++i)
              ASSERT_EQ(element(cache.k_rows(l, s, h), p * dim_k + i, type), value_at(l, s, p, h, i, false));
            for (int64_t i = 0; i < dim_v; ++i)
              ASSERT_EQ(element(cache.v_rows(l, s, h), p * dim_v + i, type), value_at(l, s, p, h, i, true));
          }
  }
}

TEST(KvCache, ValuesInKeysAreTheKeyRows) {
  KvCache cache(1, 2, 4, 1, 6, 4, DType::F32, true);
  EXPECT_EQ(cache.v_rows(0, 1, 0), cache.k_rows(0, 1, 0));
  EXPECT_EQ(cache.v_stride(), 6);
  EXPECT_EQ(cache.bytes(), size_t(2 * 4 * 6 * 4));
  const std::vector<float> k = {1, 2, 3, 4, 5, 6};
  cache.store(0, 1, 2, k.data(), nullptr);
  EXPECT_EQ(static_cast<const float*>(cache.k_rows(0, 1, 0))[2 * 6 + 5], 6.0f);
  EXPECT_THROW(KvCache(1, 1, 4, 1, 4, 6, DType::F32, true), Error);
  EXPECT_THROW(KvCache(1, 1, 4, 1, 4, 4, DType::Q8_0), Error);
}

// commit_pages makes every page of keys and values resident at once (a server's
// memory does not grow as its slots reach new positions) and leaves zeros.
TEST(KvCache, CommittedPagesAreResidentAndZero) {
  for (const bool values_in_keys : {false, true}) {
    // 40 MiB of keys: above any malloc mmap threshold, so fresh untouched pages.
    KvCache cache(2, 10, 4096, 2, 64, 64, DType::F32, values_in_keys);
    const size_t per_head = size_t(4096 * 64 * 4);
    const auto* k_first = static_cast<const uint8_t*>(cache.k_rows(0, 0, 0));
    const auto* v_first = static_cast<const uint8_t*>(cache.v_rows(0, 0, 0));
    const size_t k_bytes = values_in_keys ? cache.bytes() : cache.bytes() / 2;
    const int64_t before = mapped_resident_bytes(k_first, k_bytes);
    if (before < 0) GTEST_SKIP() << "no /proc/self/pagemap";
    EXPECT_LT(before, int64_t(k_bytes / 2));
    cache.commit_pages();
    // Whole pages count: the allocation's partial first and last pages make it a little more.
    EXPECT_GE(mapped_resident_bytes(k_first, k_bytes), int64_t(k_bytes));
    if (!values_in_keys) {
      EXPECT_GE(mapped_resident_bytes(v_first, k_bytes), int64_t(k_bytes));
    }
    const auto* last_k = static_cast<const float*>(cache.k_rows(1, 9, 1));
    EXPECT_EQ(last_k[per_head / 4 - 1], 0.0f);
    EXPECT_EQ(static_cast<const float*>(cache.v_rows(1, 9, 1))[0], 0.0f);
  }
}

}  // namespace
}  // namespace shardlm
