#include "comm/reduce.h"

#include <immintrin.h>

#include <cstdint>

#include <fmt/format.h>

#include "core/error.h"

namespace shardlm::comm {
namespace {

// The scalar forms are the definition; the AVX2 loops compute the same
// operations lane by lane (max as `a > b ? a : b`, as MAXPS does), so results
// do not depend on the CPU.
inline float combine(float a, float b, ReduceOp op) { return op == ReduceOp::Sum ? a + b : (a > b ? a : b); }

template <DType T>
inline float load1(const void* p, size_t i) {
  if constexpr (T == DType::F32) return static_cast<const float*>(p)[i];
  else if constexpr (T == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  else return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

template <DType T>
inline void store1(void* p, size_t i, float v) {
  if constexpr (T == DType::F32) static_cast<float*>(p)[i] = v;
  else if constexpr (T == DType::F16) static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
  else static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
}

template <DType T>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const void* p, size_t i) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (T == DType::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// bf16 round-to-nearest-even with NaN kept quiet, exactly as f32_to_bf16.
__attribute__((target("avx2,fma,f16c"))) inline __m128i to_bf16x8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
  r = _mm256_blendv_epi8(r, qnan, nan);
  // Values are < 2^16, so the unsigned-saturating pack is exact.
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

template <DType T>
__attribute__((target("avx2,fma,f16c"))) inline void store8(void* p, size_t i, __m256 v) {
  if constexpr (T == DType::F32) {
    _mm256_storeu_ps(static_cast<float*>(p) + i, v);
  } else {
    __m128i h;
    if constexpr (T == DType::F16) h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    else h = to_bf16x8(v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i), h);
  }
}

// Every source element is loaded before the output element is stored, so
// `out` may alias any source.
template <DType T>
void reduce_scalar(void* out, std::span<const void* const> srcs, size_t from, size_t count, ReduceOp op) {
  for (size_t i = from; i < count; ++i) {
    float acc = load1<T>(srcs[0], i);
    for (size_t s = 1; s < srcs.size(); ++s) acc = combine(acc, load1<T>(srcs[s], i), op);
    store1<T>(out, i, acc);
  }
}

template <DType T, ReduceOp Op>
__attribute__((target("avx2,fma,f16c"))) void reduce_avx2(void* out, std::span<const void* const> srcs,
                                                           size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256 a = load8<T>(srcs[0], i), b = load8<T>(srcs[0], i + 8);
    for (size_t s = 1; s < srcs.size(); ++s) {
      const __m256 x = load8<T>(srcs[s], i), y = load8<T>(srcs[s], i + 8);
      if constexpr (Op == ReduceOp::Sum) {
        a = _mm256_add_ps(a, x);
        b = _mm256_add_ps(b, y);
      } else {
        a = _mm256_max_ps(a, x);
        b = _mm256_max_ps(b, y);
      }
    }
    store8<T>(out, i, a);
    store8<T>(out, i + 8, b);
  }
  reduce_scalar<T>(out, srcs, i, count, Op);
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
}

template <DType T>
void reduce_typed(void* out, std::span<const void* const> srcs, size_t count, ReduceOp op) {
  if (!have_avx2()) return reduce_scalar<T>(out, srcs, 0, count, op);
  if (op == ReduceOp::Sum) reduce_avx2<T, ReduceOp::Sum>(out, srcs, count);
  else reduce_avx2<T, ReduceOp::Max>(out, srcs, count);
}

[[noreturn]] void not_reducible(DType dtype) {
  throw Error(fmt::format("comm: cannot reduce dtype {} (only f32, f16, bf16)", dtype_name(dtype)));
}

}  // namespace

size_t reduce_elem_bytes(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    default: not_reducible(dtype);
  }
}

float load_elem(const void* buf, DType dtype, size_t i) {
  switch (dtype) {
    case DType::F32: return load1<DType::F32>(buf, i);
    case DType::F16: return load1<DType::F16>(buf, i);
    case DType::BF16: return load1<DType::BF16>(buf, i);
    default: not_reducible(dtype);
  }
}

void store_elem(void* buf, DType dtype, size_t i, float v) {
  switch (dtype) {
    case DType::F32: return store1<DType::F32>(buf, i, v);
    case DType::F16: return store1<DType::F16>(buf, i, v);
    case DType::BF16: return store1<DType::BF16>(buf, i, v);
    default: not_reducible(dtype);
  }
}

void reduce_into(void* acc, const void* src, size_t count, DType dtype, ReduceOp op) {
  const void* const srcs[2] = {acc, src};
  reduce_ordered(acc, srcs, count, dtype, op);
}

void reduce_ordered(void* out, std::span<const void* const> srcs, size_t count, DType dtype, ReduceOp op) {
  reduce_elem_bytes(dtype);
  if (srcs.empty()) return;
  switch (dtype) {
    case DType::F32: return reduce_typed<DType::F32>(out, srcs, count, op);
    case DType::F16: return reduce_typed<DType::F16>(out, srcs, count, op);
    default: return reduce_typed<DType::BF16>(out, srcs, count, op);
  }
}

void Combine::apply(void* acc, const void* msg, size_t bytes) const {
  const void* const acc_first[2] = {acc, msg};
  const void* const msg_first[2] = {msg, acc};
  reduce_ordered(acc, message_first ? msg_first : acc_first, bytes / elem_bytes(), dtype, op);
}

}  // namespace shardlm::comm
