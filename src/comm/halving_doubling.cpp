#include <bit>

#include "comm/algorithms.h"
#include "comm/reduce.h"

namespace shardlm::comm {

void HalvingDoublingAllReduce::run() {
  const int n = links_.size(), me = links_.rank(), p = int(std::bit_floor(unsigned(n)));
  const size_t elem = reduce_elem_bytes(dtype_);
  uint8_t* tmp = links_.scratch(count_ * elem);
  if (!fold_in(links_, p, buf_, tmp, count_, dtype_, op_)) return;

  // Halving: each step keeps half of the range the pair shares, the lower
  // rank the lower half, and combines the partner's partial of it in.
  struct Split {
    size_t lo, mid, hi;
  };
  Split splits[32];
  int steps = 0;
  size_t lo = 0, hi = count_;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int partner = me ^ mask;
    const bool lower = me < partner;
    const Split s{lo, lo + (hi - lo) / 2, hi};
    splits[steps++] = s;
    const size_t keep_lo = lower ? s.lo : s.mid, keep_hi = lower ? s.mid : s.hi;
    const size_t give_lo = lower ? s.mid : s.lo, give_hi = lower ? s.hi : s.mid;
    const size_t keep = keep_hi - keep_lo;
    // The half kept is not the half sent: it can be combined into as it arrives.
    RequestPtr reqs[2] = {links_.isend(partner, buf_ + give_lo * elem, (give_hi - give_lo) * elem),
                          links_.irecv_reduce(partner, buf_ + keep_lo * elem, keep, dtype_, op_, !lower)};
    if (reqs[1]) {
      links_.wait(reqs);
    } else {
      reqs[1] = links_.irecv(partner, tmp, keep * elem);
      links_.wait(reqs);
      Combine{dtype_, op_, !lower}.apply(buf_ + keep_lo * elem, tmp, keep * elem);
    }
    lo = keep_lo;
    hi = keep_hi;
  }
  // Doubling: the same pairs in reverse swap their finished parts.
  for (int mask = 1; mask < p; mask *= 2) {
    const int partner = me ^ mask;
    const bool lower = me < partner;
    const Split& s = splits[--steps];
    const size_t other_lo = lower ? s.mid : s.lo, other_hi = lower ? s.hi : s.mid;
    RequestPtr reqs[2] = {links_.isend(partner, buf_ + lo * elem, (hi - lo) * elem),
                          links_.irecv(partner, buf_ + other_lo * elem, (other_hi - other_lo) * elem)};
    links_.wait(reqs);
    lo = s.lo;
    hi = s.hi;
  }
  fold_out(links_, p, buf_, count_ * elem);
}

}  // namespace shardlm::comm
