// Philox4x32-10 (Salmon et al., SC'11): a counter-based random number generator. A random value is
// a pure function of (key, counter), so the same stream comes out on the CPU and the GPU and in any
// order or partition of the work. Header-only; usable from CUDA device code.
//
// The project's convention for element-wise randomness (dropout masks, initialisation):
//   key     = seed (64 bits)
//   counter = (element_index / 4 as 64 bits, stream as 64 bits)
//   value   = output word (element_index % 4)
// so element i of stream s under seed k is PhiloxUniform(k, s, i), whoever computes it.
#ifndef MT_CORE_PHILOX_H_
#define MT_CORE_PHILOX_H_

#include <cstdint>

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MT_HOST_DEVICE inline
#endif

namespace mt {

struct Philox4x32Output {
  uint32_t v[4];
};

MT_HOST_DEVICE void PhiloxMulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// The raw generator: ten rounds over a 128-bit counter with a 64-bit key.
MT_HOST_DEVICE Philox4x32Output Philox4x32_10(const uint32_t ctr[4], const uint32_t key[2]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    PhiloxMulHiLo(0xD2511F53u, c0, &hi0, &lo0);
    PhiloxMulHiLo(0xCD9E8D57u, c2, &hi1, &lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;  // Weyl key schedule.
    k1 += 0xBB67AE85u;
  }
  return Philox4x32Output{{c0, c1, c2, c3}};
}

// The 32 random bits of element `index` in `stream` under `seed`.
MT_HOST_DEVICE uint32_t PhiloxBits(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index >> 2;
  const uint32_t ctr[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                           static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return Philox4x32_10(ctr, key).v[index & 3];
}

// Uniform in [0, 1) with 24 random bits (every value exactly representable as a float).
MT_HOST_DEVICE float PhiloxUniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(PhiloxBits(seed, stream, index) >> 8) * (1.0f / 16777216.0f);
}

}  // namespace mt

#endif  // MT_CORE_PHILOX_H_
