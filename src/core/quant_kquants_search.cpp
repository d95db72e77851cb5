#include "core/quant_kquants_search.h"

#include <algorithm>
#include <cmath>

#include "core/quant_blocks.h"
#include "core/quant_impl.h"

namespace shardlm::kquant_search {
namespace {

// Below this magnitude a group counts as all zeros.
constexpr float kGroupEps = 1e-15f;

int symmetric_code(float iscale, float x, int nmax) { return std::clamp(nearest_int(iscale * x), -nmax, nmax - 1); }

}  // namespace

float fit_symmetric_x2(int n, int nmax, const float* x, int8_t* L) {
  const float max = quant_impl::signed_absmax(n, x);
  if (std::fabs(max) < kGroupEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.f;
  }
  // Σw·x·l and Σw·l² of the codes for one trial inverse scale; the best scale
  // for fixed codes is their ratio and its error falls as (Σwxl)²/Σwl² grows.
  auto sums = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0.f;
    *suml2 = 0.f;
    for (int i = 0; i < n; ++i) {
      const float l = float(symmetric_code(iscale, x[i], nmax));
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  auto assign = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + symmetric_code(iscale, x[i], nmax));
  };
  float iscale = float(-nmax) / max;
  float sumlx, suml2;
  sums(iscale, &sumlx, &suml2);
  assign(iscale);
  float scale = suml2 != 0.f ? sumlx / suml2 : 0.f;
  float best = scale * sumlx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(step)) / max;
    sums(iscale, &sumlx, &suml2);
    if (suml2 > 0.f && sumlx * sumlx > best * suml2) {
      assign(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L) {
  const float max = quant_impl::signed_absmax(n, x);
  if (std::fabs(max) < kGroupEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.f;
  }
  const float iscale = float(-nmax) / max;
  float sumlx = 0.f, suml2 = 0.f;
  for (int i = 0; i < n; ++i) {
    const int l = symmetric_code(iscale, x[i], nmax);
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (slx <= 0.f) continue;
      float sl2 = suml2 - w * float(L[i]) * float(L[i]);
      // The code that best fits x[i] given the scale of all the others.
      const int l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (l == L[i]) continue;
      slx += w * x[i] * float(l);
      sl2 += w * float(l) * float(l);
      if (sl2 > 0.f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = int8_t(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.f ? sumlx / suml2 : 0.f;
}

float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, uint8_t* scratch,
                 const AffineGrid& grid) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0.f) min = 0.f;  // the offset only ever shifts down
  if (max == min) {
    std::fill(L, L + n, uint8_t(0));
    *min_out = -min;
    return 0.f;
  }
  auto code = [&](float iscale, float v) { return std::clamp(nearest_int(iscale * (v - min)), 0, nmax); };
  auto error_of = [&](float scale, float offset, const uint8_t* codes) {
    float err = 0.f;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * float(codes[i]) + offset - x[i];
      err += w[i] * (grid.abs_error ? std::fabs(diff) : diff * diff);
    }
    return err;
  };

  float iscale = float(nmax) / (max - min);
  float scale = 1.f / iscale;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(code(iscale, x[i]));
  float best_error = error_of(scale, min, L);

  for (int step = 0; step <= grid.nstep; ++step) {
    iscale = (grid.rmin + grid.rdelta * float(step) + float(nmax)) / (max - min);
    float sum_l = 0.f, sum_l2 = 0.f, sum_xl = 0.f;
    for (int i = 0; i < n; ++i) {
      const int l = code(iscale, x[i]);
      scratch[i] = uint8_t(l);
      sum_l += w[i] * float(l);
      sum_l2 += w[i] * float(l) * float(l);
      sum_xl += w[i] * float(l) * x[i];
    }
    // Weighted least squares for x ≈ scale·l + offset with these codes.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0.f) continue;
    float trial_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float trial_offset = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (trial_offset > 0.f) {
      trial_offset = 0.f;
      trial_scale = sum_xl / sum_l2;
    }
    const float err = error_of(trial_scale, trial_offset, scratch);
    if (err < best_error) {
      std::copy(scratch, scratch + n, L);
      best_error = err;
      scale = trial_scale;
      min = trial_offset;
    }
  }
  *min_out = -min;
  return scale;
}

}  // namespace shardlm::kquant_search
