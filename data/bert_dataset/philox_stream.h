// A sequential stream of random numbers over the project's counter-based generator (core/philox.h):
// draw k of stream `stream` under `seed` is PhiloxBits(seed, stream, k), k = 0, 1, 2, ... So the
// numbers a BERT sample uses are a pure function of (seed, sample index), whatever thread or
// process computes it, and a test can reproduce them with PhiloxBits alone.
//
// Derived draws (each consumes whole 32-bit draws, in this order):
//   NextBits()       1 draw.
//   NextDouble()     2 draws a, b: (a * 2^21 + (b >> 11)) / 2^53, uniform in [0, 1).
//   UniformBelow(n)  1 or more draws: the first r >= (2^32 - n) mod n, returned as r mod n
//                    (rejection makes every residue equally likely); n in [1, 2^32 - 1].
// Not thread-safe (one stream per sample); cheap to construct.
#ifndef MT_DATA_BERT_DATASET_PHILOX_STREAM_H_
#define MT_DATA_BERT_DATASET_PHILOX_STREAM_H_

#include <cstdint>

#include "core/philox.h"
#include "glog/logging.h"

namespace mt {
namespace data {

class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  // Draws consumed so far (the index of the next draw).
  uint64_t position() const { return position_; }

  uint32_t NextBits() {
    // One Philox block gives four consecutive draws; keep it for the next three.
    const uint64_t block = position_ >> 2;
    if (block != block_index_ || !block_valid_) {
      const uint32_t ctr[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                               static_cast<uint32_t>(stream_),
                               static_cast<uint32_t>(stream_ >> 32)};
      const uint32_t key[2] = {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)};
      block_ = Philox4x32_10(ctr, key);
      block_index_ = block;
      block_valid_ = true;
    }
    return block_.v[position_++ & 3];
  }

  double NextDouble() {
    const uint64_t a = NextBits();
    const uint64_t b = NextBits();
    return static_cast<double>((a << 21) | (b >> 11)) * (1.0 / 9007199254740992.0);
  }

  uint32_t UniformBelow(uint64_t n) {
    CHECK(n >= 1 && n <= 0xFFFFFFFFu) << "UniformBelow(" << n << ")";
    const uint32_t m = static_cast<uint32_t>(n);
    const uint32_t threshold = (0u - m) % m;  // (2^32 - m) mod m.
    for (;;) {
      const uint32_t r = NextBits();
      if (r >= threshold) return r % m;
    }
  }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t position_ = 0;
  Philox4x32Output block_{};
  uint64_t block_index_ = 0;
  bool block_valid_ = false;
};

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_BERT_DATASET_PHILOX_STREAM_H_
