#include "core/dtype.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace mt {
namespace {

// Independent reference: round a float to the nearest value with `mant_bits` explicit mantissa
// bits and exponent range [min_exp, max_exp] (IEEE style, with subnormals), ties to even, computed
// in double arithmetic.
double RoundToFormat(double x, int mant_bits, int min_exp, int max_exp) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double ax = std::fabs(x);
  int e = std::ilogb(ax);
  if (e < min_exp) e = min_exp;  // Subnormal range shares the minimum exponent's spacing.
  const double ulp = std::ldexp(1.0, e - mant_bits);
  double q = ax / ulp;  // Exact in double for these formats.
  double fl = std::floor(q);
  double diff = q - fl;
  double r = fl;
  if (diff > 0.5 || (diff == 0.5 && std::fmod(fl, 2.0) != 0)) r = fl + 1;
  double result = r * ulp;
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -mant_bits), max_exp);
  // Overflow: IEEE rounds to infinity when the value is at least max + ulp/2 of the top binade.
  if (result > max_finite) result = INFINITY;
  return std::copysign(result, x);
}

float RandomFloat(std::mt19937& rng) {
  // Random bit patterns cover every binade, subnormals, signs.
  uint32_t u = rng();
  return BitsToFloat(u);
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(DTypeSize(DType::kU16), 2u);
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    EXPECT_EQ(*ParseDType(DTypeName(d)), d);
  }
  EXPECT_FALSE(ParseDType("float32").ok());
}

TEST(DTypeTest, HalfToFloatIsExactForAllPatterns) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const f16 h{static_cast<uint16_t>(bits)};
    const float f = HalfToFloat(h);
    const uint32_t exp = (bits >> 10) & 0x1f, mant = bits & 0x3ff;
    const double sign = (bits & 0x8000) ? -1.0 : 1.0;
    if (exp == 0x1f) {
      if (mant == 0) {
        EXPECT_TRUE(std::isinf(f) && std::signbit(f) == (sign < 0)) << bits;
      } else {
        EXPECT_TRUE(std::isnan(f)) << bits;
      }
      continue;
    }
    const double expected = exp == 0 ? sign * std::ldexp(static_cast<double>(mant), -24)
                                     : sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
    EXPECT_EQ(static_cast<double>(f), expected) << bits;
    // Round trip back to the same pattern.
    EXPECT_EQ(FloatToHalf(f).bits, h.bits) << bits;
  }
}

TEST(DTypeTest, Bf16RoundTripsAllPatterns) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const bf16 b{static_cast<uint16_t>(bits)};
    const float f = Bf16ToFloat(b);
    EXPECT_EQ(FloatBits(f), bits << 16);
    if (!std::isnan(f)) {
      EXPECT_EQ(FloatToBf16(f).bits, b.bits) << bits;
    }
  }
}

TEST(DTypeTest, FloatToHalfRoundsToNearestEven) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = RandomFloat(rng);
    const float got = HalfToFloat(FloatToHalf(f));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    const double want = RoundToFormat(f, 10, -14, 15);
    ASSERT_EQ(static_cast<double>(got), want) << "f=" << f << " bits=" << FloatBits(f);
  }
}

TEST(DTypeTest, FloatToBf16RoundsToNearestEven) {
  std::mt19937 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    const float f = RandomFloat(rng);
    const float got = Bf16ToFloat(FloatToBf16(f));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    const double want = RoundToFormat(f, 7, -126, 127);
    ASSERT_EQ(static_cast<double>(got), want) << "f=" << f << " bits=" << FloatBits(f);
  }
}

TEST(DTypeTest, HandPickedHalfCases) {
  EXPECT_EQ(FloatToHalf(1.0f).bits, 0x3c00);
  EXPECT_EQ(FloatToHalf(65504.0f).bits, 0x7bff);               // Largest finite.
  EXPECT_EQ(FloatToHalf(65519.99f).bits, 0x7bff);              // Just below the rounding midpoint.
  EXPECT_EQ(FloatToHalf(65520.0f).bits, 0x7c00);               // Midpoint ties to even = infinity.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)).bits, 0x0001);  // Smallest subnormal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)).bits, 0x0000);  // Half of it: tie to even 0.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)).bits, 0x0001);
  EXPECT_EQ(FloatToHalf(-0.0f).bits, 0x8000);
  // 1 + 2^-11 is exactly between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, HandPickedBf16Cases) {
  EXPECT_EQ(FloatToBf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 ties to even (1.0); 1 + 3*2^-8 ties up to 1 + 2^-6.
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()).bits, 0x7f80);  // Rounds to inf.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload lives only in the low bits must stay NaN, not become infinity.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(BitsToFloat(0x7f800001u)))));
}

}  // namespace
}  // namespace mt
