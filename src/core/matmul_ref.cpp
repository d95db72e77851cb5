// Scalar reference kernels: the definition every fast path is tested against.
// Float weights: f32 products summed in double (so the reference itself adds
// no rounding worth mentioning). Quantized weights: exact integer dot products
// of the weight codes with the 8-bit activation codes (matmul_kernels.h) per
// block, scaled and summed in f32 block after block.
#include <cstring>
#include <type_traits>

#include "core/matmul_kernels.h"
#include "core/quant_blocks.h"

namespace shardlm::matmul_impl {
namespace {

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <float (*ToF32)(uint16_t)>
float dot_half(const uint8_t* w, const void* x, int64_t n) {
  const auto* xf = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(ToF32(load<uint16_t>(w + 2 * i))) * double(xf[i]);
  return float(sum);
}

float dot_f32(const uint8_t* w, const void* x, int64_t n) {
  const auto* xf = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(load<float>(w + 4 * i)) * double(xf[i]);
  return float(sum);
}

float f16(uint16_t h) { return f16_to_f32(h); }
float bf16(uint16_t h) { return bf16_to_f32(h); }

// ---- 32-element blocks: codes q[32], scale d, per-block term `bias`·ds -------

struct Codes32 {
  int q[32];
  float d;
  float bias;  // multiplies the activation block's d·Σq (offsets and minimums)
};

Codes32 codes(const block_q4_0& b) {
  Codes32 c;
  for (int j = 0; j < 16; ++j) c.q[j] = b.qs[j] & 15, c.q[j + 16] = b.qs[j] >> 4;
  c.d = f16_to_f32(b.d);
  c.bias = -8.0f * c.d;
  return c;
}
Codes32 codes(const block_q4_1& b) {
  Codes32 c;
  for (int j = 0; j < 16; ++j) c.q[j] = b.qs[j] & 15, c.q[j + 16] = b.qs[j] >> 4;
  c.d = f16_to_f32(b.d);
  c.bias = f16_to_f32(b.m);
  return c;
}
template <class Block>
Codes32 q5_codes(const Block& b) {
  Codes32 c;
  for (int j = 0; j < 16; ++j) {
    c.q[j] = (b.qs[j] & 15) | q5_high_bit(b.qh, j);
    c.q[j + 16] = (b.qs[j] >> 4) | q5_high_bit(b.qh, j + 16);
  }
  return c;
}
Codes32 codes(const block_q5_0& b) {
  Codes32 c = q5_codes(b);
  c.d = f16_to_f32(b.d);
  c.bias = -16.0f * c.d;
  return c;
}
Codes32 codes(const block_q5_1& b) {
  Codes32 c = q5_codes(b);
  c.d = f16_to_f32(b.d);
  c.bias = f16_to_f32(b.m);
  return c;
}
Codes32 codes(const block_q8_0& b) {
  Codes32 c;
  for (int j = 0; j < 32; ++j) c.q[j] = b.qs[j];
  c.d = f16_to_f32(b.d);
  c.bias = 0.0f;
  return c;
}

template <class Block>
float dot_blocks32(const uint8_t* w, const void* x, int64_t n) {
  const auto* xb = static_cast<const block_q8_32*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    const Codes32 c = codes(load<Block>(w + b * sizeof(Block)));
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += c.q[j] * xb[b].qs[j];
    constexpr bool kMinimum = std::is_same_v<Block, block_q4_1> || std::is_same_v<Block, block_q5_1>;
    sum += c.d * xb[b].d * float(isum) + c.bias * (kMinimum ? xb[b].s_f16 : xb[b].ds);
  }
  return sum;
}

// ---- K-quants: 256 codes, integer scale and min per sub-block ---------------

struct CodesK {
  int q[QK_K];
  int scale[16];     // per sub-block of `sub` elements
  int min[16];       // subtracted: dmin · min · Σ(activation codes of the sub-block)
  int sub = 16;      // 16 or 32 elements per sub-block
  float d, dmin;
};

CodesK codes(const block_q2_K& b) {
  CodesK c;
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    c.q[e] = (b.qs[32 * h + l] >> (2 * j)) & 3;
  }
  for (int s = 0; s < 16; ++s) c.scale[s] = b.scales[s] & 15, c.min[s] = b.scales[s] >> 4;
  c.d = f16_to_f32(b.d);
  c.dmin = f16_to_f32(b.dmin);
  return c;
}
CodesK codes(const block_q3_K& b) {
  CodesK c;
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
    const bool high = (b.hmask[l] >> (4 * h + j)) & 1;
    c.q[e] = low - (high ? 0 : 4);
  }
  int8_t sc[16];
  unpack_q3_k_scales(b.scales, sc);
  for (int s = 0; s < 16; ++s) c.scale[s] = sc[s], c.min[s] = 0;
  c.d = f16_to_f32(b.d);
  c.dmin = 0.0f;
  return c;
}
template <class Block>
CodesK codes_q4_q5_k(const Block& b, const uint8_t* qh) {
  CodesK c;
  c.sub = 32;
  for (int e = 0; e < QK_K; ++e) {
    const int k = e / 64, l = e % 32;
    const uint8_t byte = b.qs[32 * k + l];
    c.q[e] = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
    if (qh) c.q[e] |= ((qh[l] >> (e / 32)) & 1) << 4;
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    get_scale_min_k4(j, b.scales, &sc, &mn);
    c.scale[j] = sc, c.min[j] = mn;
  }
  c.d = f16_to_f32(b.d);
  c.dmin = f16_to_f32(b.dmin);
  return c;
}
CodesK codes(const block_q4_K& b) { return codes_q4_q5_k(b, nullptr); }
CodesK codes(const block_q5_K& b) { return codes_q4_q5_k(b, b.qh); }
CodesK codes(const block_q6_K& b) {
  CodesK c;
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
    const uint8_t low_byte = b.ql[64 * h + 32 * (quarter & 1) + l];
    const int low = quarter < 2 ? (low_byte & 15) : (low_byte >> 4);
    const int high = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
    c.q[e] = (low | (high << 4)) - 32;
  }
  for (int s = 0; s < 16; ++s) c.scale[s] = b.scales[s], c.min[s] = 0;
  c.d = f16_to_f32(b.d);
  c.dmin = 0.0f;
  return c;
}

template <class Block>
float dot_kquant(const uint8_t* w, const void* x, int64_t n) {
  const auto* xb = static_cast<const block_q8_K*>(x);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const CodesK c = codes(load<Block>(w + b * sizeof(Block)));
    int isum = 0, msum = 0;
    for (int s = 0; s < QK_K / c.sub; ++s) {
      int sub_sum = 0, act_sum = 0;
      for (int i = s * c.sub; i < (s + 1) * c.sub; ++i) sub_sum += c.q[i] * xb[b].qs[i];
      for (int g = s * c.sub / 16; g < (s + 1) * c.sub / 16; ++g) act_sum += xb[b].bsums[g];
      isum += c.scale[s] * sub_sum;
      msum += c.min[s] * act_sum;
    }
    sum += xb[b].d * (c.d * float(isum) - c.dmin * float(msum));
  }
  return sum;
}

using RowDot = float (*)(const uint8_t* w, const void* x, int64_t n);

template <RowDot Dot>
void rows_kernel(const KernelArgs& a, int64_t r0, int64_t r1) {
  const MatrixView& w = *a.w;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < a.n_tokens; ++t)
      a.y[t * w.rows + r] = Dot(w.row(r), static_cast<const uint8_t*>(a.x) + a.x_stride * size_t(t), w.cols);
}

}  // namespace

Kernel scalar_kernel(DType type) {
  switch (type) {
    case DType::F32: return rows_kernel<dot_f32>;
    case DType::F16: return rows_kernel<dot_half<f16>>;
    case DType::BF16: return rows_kernel<dot_half<bf16>>;
    case DType::Q4_0: return rows_kernel<dot_blocks32<block_q4_0>>;
    case DType::Q4_1: return rows_kernel<dot_blocks32<block_q4_1>>;
    case DType::Q5_0: return rows_kernel<dot_blocks32<block_q5_0>>;
    case DType::Q5_1: return rows_kernel<dot_blocks32<block_q5_1>>;
    case DType::Q8_0: return rows_kernel<dot_blocks32<block_q8_0>>;
    case DType::Q2_K: return rows_kernel<dot_kquant<block_q2_K>>;
    case DType::Q3_K: return rows_kernel<dot_kquant<block_q3_K>>;
    case DType::Q4_K: return rows_kernel<dot_kquant<block_q4_K>>;
    case DType::Q5_K: return rows_kernel<dot_kquant<block_q5_K>>;
    case DType::Q6_K: return rows_kernel<dot_kquant<block_q6_K>>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl
