// The SIMD conversions against core/dtype.h's scalar ones, bit for bit: every one of the 65536
// bf16 and f16 values widened, and f32 values narrowed to bf16 (random bit patterns, which cover
// NaNs with payloads, infinities, subnormals and rounding ties, plus hand-picked cases), over
// lengths that do and do not fill whole vectors.
#include "core/ops/convert_simd.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace internal {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(ConvertSimdTest, WideningEveryBf16AndF16ValueIsExact) {
  std::vector<bf16> b(65536);
  std::vector<f16> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    b[i].bits = static_cast<uint16_t>(i);
    h[i].bits = static_cast<uint16_t>(i);
  }
  for (int64_t n : {int64_t{65536}, int64_t{65533}, int64_t{5}}) {
    std::vector<float> out(n);
    Bf16ToF32Range(b.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(Bits(out[i]), Bits(Bf16ToFloat(b[i]))) << "bf16 bits " << i << " n " << n;
    }
    F16ToF32Range(h.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(Bits(out[i]), Bits(HalfToFloat(h[i]))) << "f16 bits " << i << " n " << n;
    }
  }
}

TEST(ConvertSimdTest, NarrowingToBf16RoundsAsTheScalarConversion) {
  std::mt19937 rng(11);
  std::vector<uint32_t> patterns = {
      0x00000000u, 0x80000000u,               // Zeros.
      0x7f800000u, 0xff800000u,               // Infinities.
      0x7f800001u, 0xffc12345u, 0x7fbfffffu,  // NaNs (signalling and quiet, with payloads).
      0x00000001u, 0x807fffffu,               // Subnormals.
      0x7f7fffffu,                            // The largest float: rounds up to infinity.
      0x3f808000u, 0x3f818000u,               // Ties: to even (down), to even (up).
      0x3f807fffu, 0x3f808001u};
  for (int i = 0; i < 1 << 20; ++i) patterns.push_back(rng());
  std::vector<float> in(patterns.size());
  std::memcpy(in.data(), patterns.data(), patterns.size() * sizeof(float));
  for (int64_t n :
       {static_cast<int64_t>(in.size()), static_cast<int64_t>(in.size()) - 3, int64_t{7}}) {
    std::vector<bf16> out(n);
    F32ToBf16Range(in.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i].bits, FloatToBf16(in[i]).bits) << std::hex << "f32 bits " << patterns[i];
    }
  }
}

}  // namespace
}  // namespace internal
}  // namespace ops
}  // namespace mt
