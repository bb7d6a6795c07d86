#include "core/philox.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mt {
namespace {

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(PhiloxTest, KnownAnswers) {
  struct Case {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t out[4];
  } cases[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case& c : cases) {
    Philox4x32Output o = Philox4x32_10(c.ctr, c.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(o.v[i], c.out[i]) << i;
  }
}

TEST(PhiloxTest, ElementConventionAndUniformity) {
  // Element 5 of stream 0 under seed 0 is word 1 of block 1.
  const uint32_t ctr[4] = {1, 0, 0, 0}, key[2] = {0, 0};
  EXPECT_EQ(PhiloxBits(0, 0, 5), Philox4x32_10(ctr, key).v[1]);
  // Different streams and seeds give different values.
  EXPECT_NE(PhiloxBits(1, 0, 0), PhiloxBits(0, 0, 0));
  EXPECT_NE(PhiloxBits(0, 1, 0), PhiloxBits(0, 0, 0));
  // Mean and variance of 1e6 uniforms: 1/2 and 1/12 within 5 standard errors.
  const int n = 1000000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = PhiloxUniform(42, 3, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum2 += u * u;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 5 * std::sqrt(1.0 / 180 / n));
}

}  // namespace
}  // namespace mt
