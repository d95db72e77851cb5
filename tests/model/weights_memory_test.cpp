// What the loaded weights keep resident of the mapped file: only the pages of
// matrices still read from it (ModelWeights::release_unread_file_pages).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "core/memory_usage.h"
#include "model_test_util.h"

namespace shardlm::test {
namespace {

bool inside(const void* p, const gguf::File& f) {
  const auto at = reinterpret_cast<uintptr_t>(p), begin = reinterpret_cast<uintptr_t>(f.bytes());
  return at >= begin && at < begin + f.file_size();
}

// Bytes of the matrices the model still reads from the file, each rounded
// out to whole pages.
int64_t file_bytes_still_read(const ModelWeights& w, const gguf::File& f) {
  const auto page = int64_t(sysconf(_SC_PAGESIZE));
  int64_t n = 0;
  const auto add = [&](const MatrixView& m) {
    if (m.data && inside(m.data, f)) n += int64_t(m.row_stride) * m.rows + 2 * page;
  };
  w.for_each_matrix(1, [&](const MatrixView& m, double, bool) { add(m); });
  if (w.token_embd.data != w.output.data) add(w.token_embd);
  return n;
}

void expect_only_read_pages_resident(const std::string& name) {
  SCOPED_TRACE(name);
  Loaded m(model_path(name), 1);
  m.prompt({1, 2, 3, 4, 5}, false);
  m.step(6, 5);
  const auto& w = m.model->weights();
  for (const auto& L : w.layers) {
    EXPECT_FALSE(inside(L.attn_norm, *m.file));
    EXPECT_FALSE(inside(L.ffn_norm, *m.file));
  }
  EXPECT_FALSE(inside(w.output_norm, *m.file));
  const int64_t resident = mapped_resident_bytes(m.file->bytes(), m.file->file_size());
  ASSERT_GE(resident, 0) << "/proc/self/pagemap unavailable";
  EXPECT_LE(resident, file_bytes_still_read(w, *m.file))
      << "of a " << m.file->file_size() << "-byte file, " << w.owned_bytes() << " bytes copied";
}

TEST(WeightsMemory, OnlyPagesOfMatricesReadFromTheFileStayMapped) {
  expect_only_read_pages_resident("stories260K-Q4_0.gguf");
  expect_only_read_pages_resident("stories260K-Q8_0.gguf");
  expect_only_read_pages_resident("tiny-random-llama-kq-Q4_K_M.gguf");
}


// Copies of 2 MiB or more start on a 2 MiB boundary (so their whole 2 MiB
// stretches can be huge pages), smaller ones on a cache line; both writable
// to the last byte (ASan checks the bounds).
TEST(WeightsMemory, CopiesAreAlignedForHugePagesAndCacheLines) {
  constexpr size_t kHuge = size_t(2) << 20;
  for (const size_t bytes : {size_t(1), size_t(100) << 10, kHuge - 1, kHuge, 3 * kHuge + 4096 + 17}) {
    SCOPED_TRACE(bytes);
    const auto copy = allocate_weight_copy(bytes);
    const auto at = reinterpret_cast<uintptr_t>(copy.get());
    EXPECT_EQ(at % (bytes >= kHuge ? kHuge : 64), 0u);
    std::memset(copy.get(), 7, bytes);
    EXPECT_EQ(copy[bytes - 1], 7);
  }
}

}  // namespace
}  // namespace shardlm::test
