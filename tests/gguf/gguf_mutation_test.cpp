// The fuzz seeds and a real model header, plus a few hundred deterministic
// random mutations of each, through File::parse: each must parse or throw
// shardlm::Error (ASan/UBSan in CI catch the rest). scripts/fuzz.sh goes further.
#include <gtest/gtest.h>

#include <random>

#include "gguf_test_util.h"

namespace shardlm::gguf {
namespace {
using namespace testing;

std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& p : gguf_files_under(models_dir().parent_path() / "fuzz" / "seeds")) out.push_back(read_all(p));
  const std::filesystem::path model = models_dir() / "stories260K-Q4_0.gguf";
  if (std::filesystem::exists(model)) out.push_back(read_all(model));
  return out;
}

// One random edit of the kinds that break parsers: bit flips, boundary
// integers over a field, truncation, duplicated or deleted spans.
void mutate(std::vector<uint8_t>& d, std::mt19937_64& rng, size_t hot_region) {
  auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
  const size_t region = std::min(hot_region, d.size());
  switch (rng() % 5) {
    case 0:
      if (!d.empty()) d[pick(region)] ^= uint8_t(1u << (rng() % 8));
      break;
    case 1: {
      static const uint64_t kInteresting[] = {0, 1, 3, 4, 9, 13, 0x7f, 0xff, 0xffff, 0x7fffffff, 0xffffffff,
                                              uint64_t(1) << 32, uint64_t(1) << 62, ~uint64_t(0), ~uint64_t(0) / 2};
      const uint64_t v = kInteresting[rng() % std::size(kInteresting)];
      const size_t width = (rng() & 1) ? 8 : 4;
      if (d.size() >= width) std::memcpy(d.data() + pick(std::min(region, d.size() - width + 1)), &v, width);
      break;
    }
    case 2:
      d.resize(pick(d.size()));
      break;
    case 3: {
      if (d.empty()) break;
      const size_t at = pick(region), n = std::min<size_t>(1 + pick(32), d.size() - at);
      std::vector<uint8_t> span(d.begin() + at, d.begin() + at + n);
      d.insert(d.begin() + pick(region), span.begin(), span.end());
      break;
    }
    case 4: {
      if (d.empty()) break;
      const size_t at = pick(region);
      d.erase(d.begin() + at, d.begin() + std::min(d.size(), at + 1 + pick(16)));
      break;
    }
  }
}

TEST(GgufMutation, SeedsParseAndMutationsNeverCrash) {
  const auto all = seeds();
  if (all.empty()) GTEST_SKIP() << "no seeds found";
  std::mt19937_64 rng(20261129);
  int errors = 0, parsed = 0;
  for (const auto& seed : all) {
    ASSERT_EQ(parse_error(seed), "");
    // Mutations land in the header, where the parser's decisions are.
    size_t header = seed.size();
    if (auto f = File::parse(seed.data(), seed.size()); !f->tensors().empty()) header = f->data_offset();
    for (int i = 0; i < 300; ++i) {
      auto d = seed;
      for (int k = 0, n = 1 + int(rng() % 3); k < n; ++k) mutate(d, rng, header);
      try {
        auto f = File::parse(d.data(), d.size(), "m.gguf");
        for (const auto& t : f->tensors()) {
          if (t.n_bytes) {
            ASSERT_LE(t.data + t.n_bytes, d.data() + d.size()) << t.name;
          }
        }
        ++parsed;
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("m.gguf: ", 0), 0u) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        ++errors;
      }
    }
  }
  // Both outcomes must occur, or the mutations are not exercising anything.
  EXPECT_GT(errors, 100);
  EXPECT_GT(parsed, 10);
}

}  // namespace
}  // namespace shardlm::gguf
