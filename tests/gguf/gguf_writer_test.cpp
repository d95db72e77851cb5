// Writer → reader round trips: every value type, nested arrays, tensors of
// several types written in pieces, alignment, and the writer's own checks.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <numeric>

#include "gguf_test_util.h"

namespace shardlm::gguf {
namespace {
using namespace testing;

std::shared_ptr<Array> array_of(ValueType t, std::vector<Value> items) {
  auto a = std::make_shared<Array>();
  a->type = t;
  a->items = std::move(items);
  return a;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 7);
  return v;
}

TEST(GgufWriter, RoundTripsEveryValueTypeAndNestedArrays) {
  TempDir dir;
  const auto path = dir.file("values.gguf");
  {
    Writer w(path);
    w.set("u8", uint8_t(200));
    w.set("i8", int8_t(-100));
    w.set("u16", uint16_t(60000));
    w.set("i16", int16_t(-30000));
    w.set("u32", uint32_t(4000000000u));
    w.set("i32", int32_t(-2000000000));
    w.set("f32", 1.5f);
    w.set("bool", true);
    w.set("string", std::string("héllo\0world", 12));
    w.set("u64", uint64_t(1) << 60);
    w.set("i64", -(int64_t(1) << 60));
    w.set("f64", 2.25);
    w.set("strings", array_of(ValueType::STRING, {std::string("a"), std::string(""), std::string("ccc")}));
    w.set("nested", array_of(ValueType::ARRAY, {array_of(ValueType::INT32, {int32_t(1), int32_t(-2)}),
                                                array_of(ValueType::STRING, {std::string("x")}),
                                                array_of(ValueType::ARRAY, {array_of(ValueType::BOOL, {false})})}));
    w.set("empty", array_of(ValueType::FLOAT32, {}));
    w.set("u32", uint32_t(7));  // replaces the earlier value, keeps its position
    w.finish();
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto f = File::open(path);
  EXPECT_EQ(f->version(), 3u);
  ASSERT_EQ(f->metadata().size(), 15u);
  EXPECT_EQ(f->metadata()[4].first, "u32");
  EXPECT_EQ(std::get<uint8_t>(*f->find("u8")), 200);
  EXPECT_EQ(std::get<int8_t>(*f->find("i8")), -100);
  EXPECT_EQ(std::get<uint16_t>(*f->find("u16")), 60000);
  EXPECT_EQ(std::get<int16_t>(*f->find("i16")), -30000);
  EXPECT_EQ(std::get<uint32_t>(*f->find("u32")), 7u);
  EXPECT_EQ(std::get<int32_t>(*f->find("i32")), -2000000000);
  EXPECT_EQ(std::get<float>(*f->find("f32")), 1.5f);
  EXPECT_EQ(std::get<bool>(*f->find("bool")), true);
  EXPECT_EQ(*f->get_string("string"), std::string("héllo\0world", 12));
  EXPECT_EQ(std::get<uint64_t>(*f->find("u64")), uint64_t(1) << 60);
  EXPECT_EQ(*f->get_i64("i64"), -(int64_t(1) << 60));
  EXPECT_EQ(*f->get_f64("f64"), 2.25);
  EXPECT_EQ(*f->get_u64("u16"), 60000u);
  EXPECT_THROW(f->get_u64("i8"), Error);  // negative
  EXPECT_EQ(*f->get_i64("i8"), -100);
  EXPECT_EQ(*f->get_string_array("strings"), (std::vector<std::string>{"a", "", "ccc"}));
  const Array& nested = f->require_array("nested");
  ASSERT_EQ(nested.type, ValueType::ARRAY);
  ASSERT_EQ(nested.items.size(), 3u);
  const auto& ints = *std::get<std::shared_ptr<Array>>(nested.items[0]);
  EXPECT_EQ(ints.type, ValueType::INT32);
  EXPECT_EQ(std::get<int32_t>(ints.items[1]), -2);
  const auto& deep = *std::get<std::shared_ptr<Array>>(std::get<std::shared_ptr<Array>>(nested.items[2])->items[0]);
  EXPECT_EQ(deep.type, ValueType::BOOL);
  EXPECT_EQ(std::get<bool>(deep.items[0]), false);
  EXPECT_TRUE(f->get_f32_array("empty")->empty());
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufWriter, StreamsTensorsOfSeveralTypesInPieces) {
  TempDir dir;
  const auto path = dir.file("tensors.gguf");
  struct Spec {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
  };
  const std::vector<Spec> specs = {
      {"a.f32", DType::F32, {5, 3}},       {"b.f16", DType::F16, {7}},
      {"c.q8_0", DType::Q8_0, {64, 3}},    {"d.q4_0", DType::Q4_0, {32, 2, 2}},
      {"e.q4_k", DType::Q4_K, {256, 1, 1, 2}}, {"f.bf16", DType::BF16, {3, 1}},
  };
  std::vector<std::vector<uint8_t>> payloads;
  {
    Writer w(path);
    w.set("general.alignment", uint32_t(64));
    for (const auto& s : specs) w.add_tensor(s.name, s.type, s.shape);
    w.begin_data();
    uint8_t seed = 1;
    for (const auto& s : specs) {
      int64_t rows = 1;
      for (size_t i = 1; i < s.shape.size(); ++i) rows *= s.shape[i];
      payloads.push_back(pattern(row_bytes(s.type, s.shape[0]) * rows, seed++));
      // Row by row, as synth streams big tensors.
      const size_t row = row_bytes(s.type, s.shape[0]);
      for (int64_t r = 0; r < rows; ++r) w.write_tensor_data(s.name, payloads.back().data() + r * row, row);
    }
    w.finish();
  }
  auto f = File::open(path);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  ASSERT_EQ(f->tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& t = f->tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.type, specs[i].type);
    EXPECT_EQ(t.n_dims, specs[i].shape.size());
    for (size_t d = 0; d < specs[i].shape.size(); ++d) EXPECT_EQ(t.ne[d], specs[i].shape[d]);
    EXPECT_EQ(t.offset % 64, 0u);
    ASSERT_EQ(t.n_bytes, payloads[i].size());
    EXPECT_EQ(std::memcmp(t.data, payloads[i].data(), t.n_bytes), 0);
  }
}

TEST(GgufWriter, RejectsMisuseWithErrors) {
  TempDir dir;
  const auto path = dir.file("bad.gguf");
  Writer w(path);
  EXPECT_THROW(w.add_tensor("q", DType::Q4_0, {33, 2}), Error);  // not a multiple of 32
  EXPECT_THROW(w.add_tensor("z", DType::F32, {0}), Error);
  EXPECT_THROW(w.add_tensor("five", DType::F32, {1, 1, 1, 1, 1}), Error);
  EXPECT_THROW(w.add_tensor(std::string(65, 'n'), DType::F32, {1}), Error);
  EXPECT_THROW(w.set("general.alignment", uint32_t(48)), Error);
  EXPECT_THROW(w.set("bad.array", array_of(ValueType::INT32, {std::string("x")})), Error);
  w.add_tensor("x", DType::F32, {4});
  EXPECT_THROW(w.add_tensor("x", DType::F32, {4}), Error);
}

TEST(GgufWriter, ChecksDataOrderAndSizes) {
  TempDir dir;
  const auto path = dir.file("order.gguf");
  {
    Writer w(path);
    w.add_tensor("first", DType::F32, {4});
    w.add_tensor("second", DType::F32, {2});
    w.begin_data();
    const float v[4] = {1, 2, 3, 4};
    EXPECT_THROW(w.write_tensor_data("second", v, 8), Error);
    EXPECT_THROW(w.write_tensor_data("first", v, 20), Error);
    w.write_tensor_data("first", v, 16);
    EXPECT_THROW(w.finish(), Error);  // "second" missing
    EXPECT_THROW(w.add_tensor("late", DType::F32, {1}), Error);
  }
  // An unfinished writer leaves neither the file nor its temporary behind.
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

// skip_remaining_data: the tensors not written read as zeros, the file has
// its full size but the file system stores a hole.
TEST(GgufWriter, SkipsRemainingDataAsAHole) {
  TempDir dir;
  const auto path = dir.file("sparse.gguf");
  const int64_t big_rows = 64 << 10;  // 8 MiB of Q8_0
  {
    Writer w(path);
    EXPECT_THROW(w.skip_remaining_data(), Error);  // before begin_data
    w.add_tensor("first", DType::F32, {3});
    w.add_tensor("big", DType::Q8_0, {128, big_rows});
    w.add_tensor("last", DType::F32, {5});
    w.begin_data();
    const float v[3] = {1, 2, 3};
    w.write_tensor_data("first", v, 8);  // part of it: the rest is a hole too
    w.skip_remaining_data();
    w.finish();
  }
  auto f = File::open(path);
  const auto& last = f->require_tensor("last");
  EXPECT_EQ(f->file_size(), f->data_offset() + (last.offset + last.n_bytes + 31) / 32 * 32);
  const auto& first = f->require_tensor("first");
  float got[3];
  std::memcpy(got, first.data, sizeof got);
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 2.0f);
  EXPECT_EQ(got[2], 0.0f);
  const auto& big = f->require_tensor("big");
  EXPECT_EQ(big.data[0], 0);
  EXPECT_EQ(big.data[big.n_bytes - 1], 0);
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_LT(int64_t(st.st_blocks) * 512, int64_t(big.n_bytes) / 2);  // not stored
}

TEST(GgufWriter, CopiesAModelsMetadataAndTensorsExactly) {
  const std::filesystem::path src = models_dir() / "stories260K-Q8_0.gguf";
  if (!std::filesystem::exists(src)) GTEST_SKIP() << "stories260K-Q8_0.gguf not found";
  auto in = File::open(src.string());
  TempDir dir;
  const auto path = dir.file("copy.gguf");
  {
    Writer w(path);
    for (const auto& [k, v] : in->metadata()) w.set(k, v);
    for (const auto& t : in->tensors())
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims));
    w.begin_data();
    for (const auto& t : in->tensors()) w.write_tensor_data(t.name, t.data, t.n_bytes);
    w.finish();
  }
  // The source was written by llama.cpp with the same layout rules: byte-identical.
  EXPECT_EQ(read_all(src), read_all(path));
}

}  // namespace
}  // namespace shardlm::gguf
