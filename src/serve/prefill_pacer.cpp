#include "serve/prefill_pacer.h"

#include <algorithm>
#include <cmath>

namespace shardlm::serve {

namespace {
// Weight of the previous steps against the newest one: about ten steps settle a fit.
constexpr double kKeep = 0.9;
// The xs spread when their weighted variance is at least this share of their
// squared mean (a standard deviation of a fifth of the mean): chunks of 2 and 3
// tokens on a shared machine fit any slope.
constexpr double kMinSpread = 0.04;
}  // namespace

void PrefillPacer::Line::add(double x, double y) {
  w_ = kKeep * w_ + 1;
  x_ = kKeep * x_ + x;
  y_ = kKeep * y_ + y;
  xx_ = kKeep * xx_ + x * x;
  xy_ = kKeep * xy_ + x * y;
}

void PrefillPacer::Line::fit(double& alpha, double& beta, IfOneX if_one_x) const {
  const double spread = w_ * xx_ - x_ * x_;  // w² × the variance of x
  if (spread > kMinSpread * x_ * x_ && spread > 0) {
    beta = (w_ * xy_ - x_ * y_) / spread;
    alpha = (y_ - beta * x_) / w_;
  } else if (if_one_x == IfOneX::ThroughOrigin) {
    alpha = 0;
    beta = slope_through_origin();
  } else {
    alpha = y_ / w_;
    beta = 0;
  }
}

double PrefillPacer::decode_seconds(int64_t n_decode) const {
  double a = 0, b = 0;
  decode_.fit(a, b, Line::IfOneX::Level);
  const double predicted = a + b * double(n_decode);
  // Outside the sizes seen a line may extrapolate below zero: the level is safer.
  return predicted > 0 ? predicted : a;
}

void PrefillPacer::observe(int64_t prompt_entries, int64_t decode_entries, double seconds) {
  if (ratio_ <= 1 || !(seconds > 0) || !std::isfinite(seconds)) return;
  if (prompt_entries == 0) {
    if (decode_entries > 0) decode_.add(double(decode_entries), seconds);
    return;
  }
  // A step of prompt entries alone has no decode step to compare with.
  if (decode_entries == 0 || decode_.empty()) return;
  extra_.add(double(prompt_entries), seconds - decode_seconds(decode_entries));
}

int64_t PrefillPacer::budget(int64_t n_decode, int64_t limit) const {
  limit = std::max<int64_t>(limit, 1);
  if (ratio_ <= 1 || n_decode == 0) return limit;
  const int64_t least = std::min(limit, kMinTokens);
  if (decode_.empty() || extra_.empty()) return least;
  const double decode_step = decode_seconds(n_decode);
  double fixed = 0, per_token = 0;
  extra_.fit(fixed, per_token, Line::IfOneX::ThroughOrigin);
  // Noise can fit a negative fixed cost or a free token: the line through the origin is the cautious reading.
  if (fixed < 0 || !(per_token > 0)) {
    fixed = 0;
    per_token = extra_.slope_through_origin();
  }
  if (!(per_token > 0) || !(decode_step > 0)) return least;
  const double fits = std::floor(((ratio_ - 1) * decode_step - fixed) / per_token + 1e-6);  // 40 ms / 2 ms is 19.999… in doubles
  return std::clamp<int64_t>(int64_t(std::min(fits, double(limit))), least, limit);
}

}  // namespace shardlm::serve
