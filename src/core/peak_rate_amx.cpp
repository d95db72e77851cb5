// The AMX tile unit's int8 rate (peak_rate.h): four independent TDPBUSD of
// full 16 × 64-byte tiles, the shape the prefill tiles use.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/amx_tile_config.h"
#include "core/clock.h"
#include "core/peak_rate.h"

namespace shardlm::peak_rate_impl {

double amx_int8_mac_rate(double min_seconds) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  load_tile_config(cfg);
  for (int t = 0; t < 8; ++t) {
    switch (t) {  // tile numbers must be immediates
      case 0: _tile_zero(0); break;
      case 1: _tile_zero(1); break;
      case 2: _tile_zero(2); break;
      case 3: _tile_zero(3); break;
      case 4: _tile_zero(4); break;
      case 5: _tile_zero(5); break;
      case 6: _tile_zero(6); break;
      default: _tile_zero(7); break;
    }
  }
  constexpr int kIterations = 20'000;
  double best = 1e30, spent = 0;
  while (spent < min_seconds) {
    const auto t0 = SteadyClock::now();
    for (int i = 0; i < kIterations; ++i) {
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 4, 7);
      _tile_dpbusd(2, 5, 6);
      _tile_dpbusd(3, 5, 7);
    }
    const double s = seconds_of(SteadyClock::now() - t0);
    best = std::min(best, s);
    spent += s;
  }
  _tile_release();
  return double(kIterations) * 4 * (16 * 16 * 64) / best;
}

}  // namespace shardlm::peak_rate_impl
