// Loops the kernels need unrolled at compile time, so that each step's
// constants (shifts, byte offsets, which register) are known: GCC kept such
// loops, picking shifts and offsets at run time (#pragma GCC unroll did not
// help once the body was large). Included only from kernel files.
#pragma once

#include <type_traits>
#include <utility>

// For lambdas that must inline into their unrolled caller.
#define SHARDLM_ALWAYS_INLINE __attribute__((always_inline))

namespace shardlm::matmul_impl {
namespace {  // internal linkage, as matmul_avx2_common.h

// f(std::integral_constant<int, 0>{}), ..., f(std::integral_constant<int, N - 1>{}).
template <int N, class F>
inline SHARDLM_ALWAYS_INLINE void unrolled(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) SHARDLM_ALWAYS_INLINE {
    (f(std::integral_constant<int, I>{}), ...);
  }(std::make_integer_sequence<int, N>{});
}

// f(0), ..., f(N - 1): unrolled as above with kUnroll, else a plain loop.
template <int N, bool kUnroll, class F>
inline SHARDLM_ALWAYS_INLINE void steps(F&& f) {
  if constexpr (kUnroll) {
    unrolled<N>(f);
  } else {
    for (int i = 0; i < N; ++i) f(i);
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl
