// Dropout masks as per-element factors, a few Philox blocks at a time (internal to core/ops):
// what ops::Dropout, ops::BiasDropoutAdd and fused attention multiply each element by.
#ifndef MT_CORE_OPS_DROPOUT_FACTORS_H_
#define MT_CORE_OPS_DROPOUT_FACTORS_H_

#include <algorithm>
#include <cstdint>

#include "core/ops/elementwise.h"
#include "core/philox.h"

namespace mt {
namespace ops {
namespace internal {

// Philox outputs of `count` consecutive counter blocks (4 words each) of (seed, stream), in the
// layout of core/philox.h. The loop over blocks vectorises (Philox4x32_10 inlines into
// straight-line code).
inline void PhiloxBlocks(uint64_t seed, uint64_t stream, uint64_t block0, int64_t count,
                         uint32_t* __restrict words) {
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int64_t b = 0; b < count; ++b) {
    const uint64_t block = block0 + b;
    const uint32_t ctr[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                             static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
    const Philox4x32Output o = Philox4x32_10(ctr, key);
    // Four separate stores (not a loop): GCC vectorises the block loop only then.
    words[4 * b] = o.v[0];
    words[4 * b + 1] = o.v[1];
    words[4 * b + 2] = o.v[2];
    words[4 * b + 3] = o.v[3];
  }
}

// The mask ops::Dropout draws: element i (of the op's flat index) is kept iff
// PhiloxUniform(seed, stream, DropoutKey(args, i)) >= p, and then scaled by 1 / (1 - p). Up to
// kMaxN elements per call.
template <int64_t kMaxN>
class DropoutFactors {
 public:
  // Null `args`: no dropout (Factors must not be called).
  explicit DropoutFactors(const DropoutArgs* args)
      : args_(args == nullptr ? DropoutArgs{} : *args) {}

  // factor[t] = what dropout multiplies element lin0 + t by: keep_scale if kept, else 0, for
  // t < n <= kMaxN. The keys of consecutive elements are consecutive except where the key mapping
  // wraps (every key_inner elements), so Philox runs once per block of four keys.
  void Factors(int64_t lin0, int64_t n, float keep_scale, float* factor) {
    for (int64_t t0 = 0; t0 < n;) {
      const int64_t lin = lin0 + t0;
      int64_t run = n - t0;
      if (args_.key_inner > 0) run = std::min(run, args_.key_inner - lin % args_.key_inner);
      const uint64_t key0 = static_cast<uint64_t>(DropoutKey(args_, lin));
      const uint64_t block0 = key0 >> 2;
      PhiloxBlocks(args_.seed, args_.stream, block0, ((key0 + run - 1) >> 2) - block0 + 1, words_);
      const uint32_t* w = words_ + (key0 & 3);
      for (int64_t t = 0; t < run; ++t) {
        // PhiloxUniform's expression, so the comparison with p is bitwise the same.
        const float u = static_cast<float>(w[t] >> 8) * (1.0f / 16777216.0f);
        factor[t0 + t] = u >= args_.p ? keep_scale : 0.0f;
      }
      t0 += run;
    }
  }

 private:
  const DropoutArgs args_;
  uint32_t words_[4 * (kMaxN / 4 + 2)];
};

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_DROPOUT_FACTORS_H_
