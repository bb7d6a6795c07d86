// Seeded shuffles for the dataset index builders, reproducible on every platform.
//
// The generator is std::mt19937_64, whose output sequence the C++ standard fixes exactly. Bounded
// integers come from UniformBelow below rather than std::uniform_int_distribution, whose algorithm
// differs between standard libraries; so a shuffle depends only on the seed and the input.
// (Megatron-LM shuffles with numpy's RandomState(seed), a 32-bit Mersenne Twister; its orders are
// not reproduced here, only its structure.)
#ifndef MT_DATA_GPT_DATASET_SHUFFLE_H_
#define MT_DATA_GPT_DATASET_SHUFFLE_H_

#include <cstdint>
#include <random>
#include <utility>

#include "absl/types/span.h"
#include "glog/logging.h"

namespace mt {
namespace data {

// A uniform integer in [0, n), n >= 1 (CHECK): draws r = (*rng)() until r >= (2^64 - n) mod n,
// then returns r mod n (rejection makes every residue equally likely).
inline uint64_t UniformBelow(std::mt19937_64* rng, uint64_t n) {
  CHECK_GE(n, 1u);
  const uint64_t threshold = (0 - n) % n;  // (2^64 - n) mod n = 2^64 mod n.
  for (;;) {
    const uint64_t r = (*rng)();
    if (r >= threshold) return r % n;
  }
}

// Fisher-Yates from the back: for i = n-1 down to 1, swap v[i] with v[UniformBelow(rng, i + 1)].
template <typename T>
void Shuffle(absl::Span<T> v, std::mt19937_64* rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const uint64_t j = UniformBelow(rng, i);
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_GPT_DATASET_SHUFFLE_H_
