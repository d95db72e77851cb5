// Small inline helpers shared by the reference (de)quantizers and the fast
// kernels, so every path decodes a block the same way.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace shardlm {

// Round to nearest, ties to even, for |x| < 2^22: adding 1.5·2^23 pushes the
// fraction out of the mantissa. The K-quant reference rounds this way (not
// std::round, which breaks ties away from zero), so byte-exactness needs it.
inline int nearest_int(float x) {
  float biased = x + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &biased, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// The 5th bit of element j (0..31) of a Q5_0/Q5_1 block, as 0 or 16.
inline int q5_high_bit(const uint8_t qh[4], int j) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return int((bits >> j) & 1u) << 4;
}

// Q4_K/Q5_K pack eight 6-bit (scale, min) pairs in 12 bytes: pairs 0..3 sit in
// the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); pairs 4..7 keep their
// low 4 bits in bytes 8..11 and their top 2 bits in the spare top bits of
// bytes 0..7.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q3_K packs sixteen 6-bit signed scales (stored +32) in 12 bytes: the low 4
// bits of scale i are in byte i%8 (low nibble for i<8, high for i>=8), the top
// 2 bits in byte 8 + i%4 at bit position 2·(i/4).
inline void unpack_q3_k_scales(const uint8_t packed[12], int8_t out[16]) {
  for (int i = 0; i < 16; ++i) {
    const int low = (i < 8) ? (packed[i] & 0x0F) : (packed[i - 8] >> 4);
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = int8_t((low | (high << 4)) - 32);
  }
}

}  // namespace shardlm
