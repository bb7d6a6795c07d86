// Deterministic byte-string mutations for the fuzz targets' regression mode (regression_driver.cc):
// the same seeds and the same PRNG seed give the same inputs on every machine, so a failure in CI
// is reproducible without the corpus libFuzzer grew.
#ifndef MT_TOOLS_FUZZ_MUTATOR_H_
#define MT_TOOLS_FUZZ_MUTATOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mt {
namespace fuzz {

// splitmix64: a small, well-mixed 64-bit generator.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, n); n > 0.
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }

 private:
  uint64_t state_;
};

// Returns seeds[k] (k drawn from rng) changed by 1 to 4 mutations: bit flips, bytes set to
// boundary values (0x00, 0x7f, 0x80, 0xff, '"', '\n', ...), little-endian 2/4/8-byte integers
// overwritten with boundary values (0, 1, -1, INT32_MAX, INT64_MAX, 2^32, ...), inserted, deleted
// or duplicated ranges, and a splice with another seed. The result never exceeds max_size bytes.
// `seeds` must be non-empty (an empty seed is allowed).
std::string Mutate(const std::vector<std::string>& seeds, size_t max_size, Rng* rng);

}  // namespace fuzz
}  // namespace mt

#endif  // MT_TOOLS_FUZZ_MUTATOR_H_
