// Hand-made and hand-corrupted headers: every one must give a one-line Error
// naming the field, never a crash or a huge allocation.
#include <gtest/gtest.h>

#include "gguf_test_util.h"

namespace shardlm::gguf {
namespace {
using namespace testing;

// Error text, checked to be one line that starts with the file name.
std::string expect_error(const std::vector<uint8_t>& data) {
  const std::string msg = parse_error(data);
  EXPECT_FALSE(msg.empty()) << "parsed without error";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("t.gguf: ", 0), 0u) << msg;
  return msg;
}

#define EXPECT_ERROR_HAS(data, text)                                      \
  do {                                                                    \
    const std::string m_ = expect_error(data);                            \
    EXPECT_NE(m_.find(text), std::string::npos) << "message: " << m_;     \
  } while (0)

// One valid file: 2 kvs, two F32 tensors of 4 floats at offsets 0 and 32.
Bytes valid_file() {
  Bytes b;
  b.header(3, 2, 2).kv_u32("a.u32", 7).str("a.str").u32(8).str("hello");
  b.tensor("t0", {4}, 0, 0).tensor("t1", {2, 2}, 0, 32);
  b.pad_to(32).zeros(48);
  return b;
}

TEST(GgufCorrupt, ValidBaselineParses) {
  auto b = valid_file();
  EXPECT_EQ(parse_error(b.b), "");
  auto f = File::parse(b.b.data(), b.b.size(), "t.gguf");
  EXPECT_EQ(f->tensors()[1].data, b.b.data() + f->data_offset() + 32);
  EXPECT_EQ(*f->get_string("a.str"), "hello");
}

TEST(GgufCorrupt, EveryTruncationFails) {
  const auto full = valid_file().b;
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE("truncated to " + std::to_string(n));
    expect_error(std::vector<uint8_t>(full.begin(), full.begin() + n));
  }
}

TEST(GgufCorrupt, TruncatedRealModelFailsEverywhere) {
  const std::filesystem::path p = models_dir() / "stories260K-Q4_0.gguf";
  if (!std::filesystem::exists(p)) GTEST_SKIP() << "stories260K-Q4_0.gguf not found";
  const auto full = read_all(p);
  auto f = File::parse(full.data(), full.size(), "t.gguf");
  uint64_t data_end = 0;
  for (const auto& t : f->tensors()) data_end = std::max(data_end, f->data_offset() + t.offset + t.n_bytes);
  // The header region in steps that hit every field kind, then a data sample.
  std::vector<size_t> cuts;
  for (size_t n = 0; n < f->data_offset(); n += 13) cuts.push_back(n);
  for (size_t n = f->data_offset(); n < data_end; n += 4099) cuts.push_back(n);
  cuts.push_back(data_end - 1);
  for (size_t n : cuts) {
    SCOPED_TRACE("truncated to " + std::to_string(n));
    expect_error(std::vector<uint8_t>(full.begin(), full.begin() + n));
  }
}

TEST(GgufCorrupt, MagicAndVersion) {
  auto b = valid_file();
  b.b[0] = 'X';
  EXPECT_ERROR_HAS(b.b, "magic at offset 0");
  Bytes v1;
  v1.header(1, 0, 0);
  EXPECT_ERROR_HAS(v1.b, "version at offset 4: unsupported version 1");
  Bytes v4;
  v4.header(4, 0, 0);
  EXPECT_ERROR_HAS(v4.b, "unsupported version 4");
  Bytes be;
  be.header(0x03000000, 0, 0);
  EXPECT_ERROR_HAS(be.b, "big-endian");
  Bytes v2;
  v2.header(2, 0, 1).kv_u32("k", 1);
  EXPECT_EQ(parse_error(v2.b), "");
}

TEST(GgufCorrupt, LyingCounts) {
  Bytes kv;
  kv.header(3, 0, uint64_t(1) << 40).kv_u32("k", 1);
  EXPECT_ERROR_HAS(kv.b, "metadata kv count at offset 16");
  Bytes tensors;
  tensors.header(3, uint64_t(-1), 0);
  EXPECT_ERROR_HAS(tensors.b, "tensor count at offset 8");
  Bytes more_kv_than_present;
  more_kv_than_present.header(3, 0, 2).kv_u32("k", 1).zeros(20);
  EXPECT_ERROR_HAS(more_kv_than_present.b, "metadata kv 1");
}

TEST(GgufCorrupt, AbsurdStringAndArrayLengths) {
  Bytes key;
  key.header(3, 0, 1).u64(uint64_t(1) << 62).zeros(16);
  EXPECT_ERROR_HAS(key.b, "metadata kv 0 key at offset 24: string length");
  Bytes value;
  value.header(3, 0, 1).str("k").u32(8).u64(uint64_t(-1)).zeros(16);
  EXPECT_ERROR_HAS(value.b, "metadata kv 0 'k' value");
  Bytes array;
  array.header(3, 0, 1).str("arr").u32(9).u32(6).u64(uint64_t(1) << 61).zeros(64);
  EXPECT_ERROR_HAS(array.b, "metadata kv 0 'arr' array count at offset");
  Bytes strings;  // 1000 strings need ≥ 8000 bytes
  strings.header(3, 0, 1).str("arr").u32(9).u32(8).u64(1000).zeros(7999);
  EXPECT_ERROR_HAS(strings.b, "array count");
  Bytes name;
  name.header(3, 1, 0).u64(uint64_t(1) << 50).zeros(40);
  EXPECT_ERROR_HAS(name.b, "tensor 0 name");
  Bytes long_name;
  long_name.header(3, 1, 0).tensor(std::string(65, 'x'), {4}, 0, 0).pad_to(32).zeros(16);
  EXPECT_ERROR_HAS(long_name.b, "limit is 64");
}

TEST(GgufCorrupt, NestedArraysDepthIsBounded) {
  Bytes ok;
  ok.header(3, 0, 1).str("n").u32(9).u32(9).u64(1).u32(9).u64(1).u32(4).u64(2).u32(5).u32(6);
  EXPECT_EQ(parse_error(ok.b), "");
  Bytes deep;
  deep.header(3, 0, 1).str("n").u32(9);
  for (int i = 0; i < 100; ++i) deep.u32(9).u64(1);
  deep.u32(4).u64(0);
  EXPECT_ERROR_HAS(deep.b, "nested deeper");
}

TEST(GgufCorrupt, UnknownTypesAndBadValues) {
  Bytes kv_type;
  kv_type.header(3, 0, 1).str("k").u32(13).u32(0);
  EXPECT_ERROR_HAS(kv_type.b, "metadata kv 0 'k' type at offset 33: unknown value type 13");
  Bytes elem_type;
  elem_type.header(3, 0, 1).str("k").u32(9).u32(99).u64(0);
  EXPECT_ERROR_HAS(elem_type.b, "array type");
  Bytes boolean;
  boolean.header(3, 0, 1).str("k").u32(7).put<uint8_t>(2);
  EXPECT_ERROR_HAS(boolean.b, "bool must be 0 or 1");
  Bytes tensor_type;
  tensor_type.header(3, 1, 0).tensor("w", {32}, 4, 0).pad_to(32).zeros(64);  // id 4 (Q4_2) was removed
  EXPECT_ERROR_HAS(tensor_type.b, "tensor 0 'w' type");
  EXPECT_ERROR_HAS(tensor_type.b, "unknown tensor type id 4");
  Bytes empty_key;
  empty_key.header(3, 0, 1).str("").u32(4).u32(1);
  EXPECT_ERROR_HAS(empty_key.b, "empty key");
}

TEST(GgufCorrupt, Duplicates) {
  Bytes keys;
  keys.header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2);
  EXPECT_ERROR_HAS(keys.b, "metadata kv 1 'k' key at offset 41: duplicate key");
  Bytes names;
  names.header(3, 2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad_to(32).zeros(64);
  EXPECT_ERROR_HAS(names.b, "tensor 1 'w' name");
  EXPECT_ERROR_HAS(names.b, "duplicate tensor name");
}

TEST(GgufCorrupt, Alignment) {
  auto with_alignment = [](Bytes kv) {
    Bytes b;
    b.header(3, 1, 1);
    b.b.insert(b.b.end(), kv.b.begin(), kv.b.end());
    b.tensor("w", {4}, 0, 0).pad_to(64).zeros(64);
    return b.b;
  };
  EXPECT_EQ(parse_error(with_alignment(Bytes().kv_u32("general.alignment", 64))), "");
  EXPECT_ERROR_HAS(with_alignment(Bytes().kv_u32("general.alignment", 0)), "power of two");
  EXPECT_ERROR_HAS(with_alignment(Bytes().kv_u32("general.alignment", 48)), "power of two");
  EXPECT_ERROR_HAS(with_alignment(Bytes().str("general.alignment").u32(8).str("32")), "must be u32");

  Bytes misaligned;
  misaligned.header(3, 1, 0).tensor("w", {4}, 0, 16).pad_to(32).zeros(64);
  EXPECT_ERROR_HAS(misaligned.b, "tensor 0 'w' offset");
  EXPECT_ERROR_HAS(misaligned.b, "not a multiple of the alignment 32");
}

TEST(GgufCorrupt, TensorRangesAndOverlaps) {
  Bytes past_end;
  past_end.header(3, 1, 0).tensor("w", {4}, 0, 32).pad_to(32).zeros(40);
  EXPECT_ERROR_HAS(past_end.b, "extends past the end");
  Bytes huge_offset;
  huge_offset.header(3, 1, 0).tensor("w", {4}, 0, uint64_t(-32)).pad_to(32).zeros(40);
  EXPECT_ERROR_HAS(huge_offset.b, "extends past the end");
  Bytes overlap;
  overlap.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).pad_to(32).zeros(128);
  EXPECT_ERROR_HAS(overlap.b, "overlaps tensor 'a'");
  Bytes same_offset;
  same_offset.header(3, 2, 0).tensor("a", {4}, 0, 0).tensor("b", {4}, 0, 0).pad_to(32).zeros(64);
  EXPECT_ERROR_HAS(same_offset.b, "overlaps");
}

TEST(GgufCorrupt, Dimensions) {
  Bytes five;
  five.header(3, 1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0).pad_to(32).zeros(32);
  EXPECT_ERROR_HAS(five.b, "tensor 0 'w' n_dims at offset 33: 5 dimensions");
  Bytes negative;
  negative.header(3, 1, 0).tensor("w", {4, uint64_t(-2)}, 0, 0).pad_to(32).zeros(32);
  EXPECT_ERROR_HAS(negative.b, "tensor 0 'w' dims at offset 37: dim 1");
  Bytes overflow;
  overflow.header(3, 1, 0).tensor("w", {uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0).pad_to(32).zeros(32);
  EXPECT_ERROR_HAS(overflow.b, "overflows int64");
  Bytes bytes_overflow;  // elements fit in int64, bytes (× 4) would not fit in 63 bits
  bytes_overflow.header(3, 1, 0).tensor("w", {uint64_t(1) << 62}, 0, 0).pad_to(32).zeros(32);
  EXPECT_ERROR_HAS(bytes_overflow.b, "tensor 0 'w' type at offset 45: byte size");
  Bytes block;
  block.header(3, 1, 0).tensor("w", {33, 2}, 2, 0).pad_to(32).zeros(128);
  EXPECT_ERROR_HAS(block.b, "not a multiple of the Q4_0 block size 32");
  Bytes zero_dim;  // an empty tensor is legal and owns no bytes
  zero_dim.header(3, 1, 0).tensor("w", {4, 0}, 0, 0).pad_to(32);
  EXPECT_EQ(parse_error(zero_dim.b), "");
}

}  // namespace
}  // namespace shardlm::gguf
