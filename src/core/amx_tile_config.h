// The 64-byte tile configuration that LDTILECFG reads (AMX, palette 1): for
// each of the 16 tiles its bytes per row and rows. Written once for the AMX
// trial (cpu.cpp) and the AMX matmul (matmul_amx.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace shardlm {

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile"))) inline void load_tile_config(const TileConfig& cfg) {
  // GCC 12's _tile_loadconfig does not tell the optimiser that it reads cfg,
  // so without this barrier the stores that filled it are dropped and
  // ldtilecfg faults.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

}  // namespace shardlm
