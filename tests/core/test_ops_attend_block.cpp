// The blocked prefill attention (ops::attend_tokens) against the reference
// per token: causal prefixes, f32 and f16 caches, padded rows, every block
// shape the model uses, and a token's result independent of its block; the
// AVX2 kernel against the reference and bit for bit against the AVX-512 one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/ops.h"
#include "core/ops_impl.h"
#include "test_matmul_util.h"

namespace shardlm::ops {
namespace {

using test::random_vector;

struct Case {
  int64_t n_tok, n_q, dim, n_pos;  // n_pos: positions the first token sees
};

struct Fixture {
  Case c;
  bool f16;
  int64_t k_stride, v_stride, q_stride, out_stride;
  std::vector<float> q, k, v;
  std::vector<f16_t> k16, v16;
  KvHead kv;
  Fixture(Case c_, bool f16_) : c(c_), f16(f16_) {
    const int64_t positions = c.n_pos + c.n_tok - 1;
    k_stride = c.dim * 3 + 16, v_stride = c.dim * 2 + 16;  // a cache row holds several heads
    q_stride = c.n_q * c.dim + 32, out_stride = c.n_q * c.dim + 48;
    q = random_vector(c.n_tok * q_stride, 21, 0.3f);
    k = random_vector(positions * k_stride, 22, 3.f);
    v = random_vector(positions * v_stride, 23, 3.f);
    k16.resize(k.size()), v16.resize(v.size());
    for (size_t i = 0; i < k.size(); ++i) k16[i] = f32_to_f16(k[i]), k[i] = f16 ? f16_to_f32(k16[i]) : k[i];
    for (size_t i = 0; i < v.size(); ++i) v16[i] = f32_to_f16(v[i]), v[i] = f16 ? f16_to_f32(v16[i]) : v[i];
    kv = KvHead{f16 ? static_cast<const void*>(k16.data()) : k.data(), f16 ? static_cast<const void*>(v16.data()) : v.data(),
                k_stride, v_stride, c.dim, c.dim, f16};
  }
  std::vector<float> blocked(int64_t t0, int64_t n_tok, SumOrder order = SumOrder::AsBlocks) const {
    std::vector<float> out(size_t(c.n_tok * out_stride), NAN);
    std::vector<float> scores(size_t(c.n_q * (c.n_pos + c.n_tok)));
    attend_tokens(q.data() + t0 * q_stride, q_stride, n_tok, c.n_q, kv, c.n_pos + t0, 0.125f, scores.data(),
                  out.data() + t0 * out_stride, out_stride, order);
    return out;
  }
  // Tokens [t0, t0 + n_tok) through one ISA's block kernel (false: shape not taken).
  template <typename Kernel>
  bool blocked_with(Kernel kernel, int64_t t0, int64_t n_tok, std::vector<float>& out) const {
    if (out.empty()) out.assign(size_t(c.n_tok * out_stride), NAN);
    return kernel(q.data() + t0 * q_stride, q_stride, n_tok, c.n_q, kv, c.n_pos + t0, 0.125f,
                  out.data() + t0 * out_stride, out_stride);
  }
  // Every token's outputs within the reference's tolerance.
  void expect_matches_reference(const std::vector<float>& got) const {
    std::vector<float> scores(size_t(c.n_q * (c.n_pos + c.n_tok))), want(size_t(c.n_q * c.dim));
    for (int64_t i = 0; i < c.n_tok; ++i) {
      ref::attend(q.data() + i * q_stride, c.n_q, kv, c.n_pos + i, 0.125f, scores.data(), want.data());
      for (int64_t j = 0; j < c.n_q * c.dim; ++j)
        ASSERT_NEAR(got[size_t(i * out_stride + j)], want[size_t(j)], 2e-4f * (1.f + std::fabs(want[size_t(j)])))
            << "token " << i << " [" << j << "]";
    }
  }
};

const Case kCases[] = {{1, 4, 64, 1},   {4, 4, 64, 1},   {4, 4, 64, 300}, {16, 1, 64, 9},  {5, 3, 64, 17},
                       {2, 8, 128, 40}, {3, 5, 128, 7},  {6, 4, 32, 5},   {8, 4, 64, 300}, {32, 1, 64, 9},
                       {7, 4, 128, 33}, {17, 1, 80, 3},  {3, 6, 576, 12}, {8, 4, 64, 700}, {11, 2, 48, 150},
                       {5, 6, 96, 260}, {9, 3, 40, 30},  {4, 7, 24, 50}};

std::string describe(const Case& c, bool f16) {
  return std::string(f16 ? "f16" : "f32") + " tokens " + std::to_string(c.n_tok) + " heads " + std::to_string(c.n_q) +
         " dim " + std::to_string(c.dim) + " n_pos " + std::to_string(c.n_pos);
}

TEST(OpsAttendTokens, MatchesReferencePerToken) {
  for (const bool f16 : {false, true}) {
    for (const Case& c : kCases) {
      SCOPED_TRACE(describe(c, f16));
      const Fixture f(c, f16);
      f.expect_matches_reference(f.blocked(0, c.n_tok));
    }
  }
}

// The AVX2 block kernel takes the blocks the AVX-512 one takes (≤ 32 queries,
// head dimensions in multiples of 16), matches the reference, gives the AVX-512
// kernel's bits wherever that one runs (so a prompt's result does not depend
// on the ISA that attended it).
TEST(OpsAttendTokens, Avx2BlocksMatchReferenceAndAvx512Bits) {
  if (active_isa() < Isa::Avx2) GTEST_SKIP() << "no AVX2";
  for (const bool f16 : {false, true}) {
    for (const Case& c : kCases) {
      if (c.n_tok < 2) continue;
      SCOPED_TRACE(describe(c, f16));
      const Fixture f(c, f16);
      std::vector<float> got;
      const bool taken = c.n_tok * c.n_q <= kAttendLanes && c.dim % 16 == 0;
      ASSERT_EQ(f.blocked_with(avx2::attend_block, 0, c.n_tok, got), taken);
      if (!taken) continue;
      f.expect_matches_reference(got);
      std::vector<float> wide;
      if (active_isa() < Isa::Avx512 || !f.blocked_with(avx512::attend_block, 0, c.n_tok, wide)) continue;
      for (int64_t i = 0; i < c.n_tok; ++i)
        ASSERT_EQ(0, std::memcmp(got.data() + i * f.out_stride, wide.data() + i * f.out_stride,
                                 size_t(c.n_q * c.dim) * sizeof(float)))
            << "token " << i;
    }
  }
}

// Tokens 0..31 attended as one block, or in blocks of 1, 2, 3, 7, 19 (a
// block of one is decode: attend in the blocks' sum order) on each ISA: the
// same bits, f32 and f16 caches, one query head and a group of four.
TEST(OpsAttendTokens, TokenResultDoesNotDependOnItsBlock) {
  for (const Case c : {Case{32, 1, 64, 20}, Case{8, 4, 128, 45}}) {
  for (const bool f16 : {false, true}) {
    const Fixture f(c, f16);
    const auto whole = f.blocked(0, c.n_tok);
    const int64_t splits[] = {0, 1, 3, 6, 7, 8, 13, 32};
    for (size_t s = 0; s + 1 < std::size(splits) && splits[s + 1] <= c.n_tok; ++s) {
      const int64_t t0 = splits[s], n = splits[s + 1] - t0;
      const auto part = f.blocked(t0, n);
      std::vector<float> part_avx2;
      bool avx2_ran = false;
      if (n > 1 && active_isa() >= Isa::Avx2) {
        avx2_ran = f.blocked_with(avx2::attend_block, t0, n, part_avx2);
      } else if (active_isa() >= Isa::Avx2) {  // decode on AVX2 (the default is AVX-512's where the CPU has it)
        part_avx2.assign(size_t(c.n_tok * f.out_stride), NAN);
        std::vector<float> scores(size_t(c.n_q * (c.n_pos + c.n_tok)));
        avx2::attend(f.q.data() + t0 * f.q_stride, c.n_q, f.kv, c.n_pos + t0, 0.125f, scores.data(),
                     part_avx2.data() + t0 * f.out_stride, SumOrder::AsBlocks);
        avx2_ran = true;
      }
      for (int64_t i = t0; i < t0 + n; ++i) {
        ASSERT_EQ(0, std::memcmp(part.data() + i * f.out_stride, whole.data() + i * f.out_stride,
                                 size_t(c.n_q * c.dim) * 4))
            << (f16 ? "f16" : "f32") << " n_q " << c.n_q << " token " << i << " in a block of " << n;
        if (avx2_ran) {
          ASSERT_EQ(0, std::memcmp(part_avx2.data() + i * f.out_stride, whole.data() + i * f.out_stride,
                                   size_t(c.n_q * c.dim) * 4))
              << "avx2 " << (f16 ? "f16" : "f32") << " token " << i << " in a block of " << n;
        }
      }
    }
  }
  }
}

}  // namespace
}  // namespace shardlm::ops
