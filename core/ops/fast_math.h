// Vectorisable f32 math for CPU kernels. Internal to core/ops.
#ifndef MT_CORE_OPS_FAST_MATH_H_
#define MT_CORE_OPS_FAST_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mt {
namespace ops {
namespace internal {

// GeLU, the tanh approximation of GPT-2 and Megatron: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
// x^3))), and its derivative. One definition for ops::Gelu and the GEMM epilogue, so that a fused
// f32 epilogue is bitwise the unfused Gelu.
inline constexpr float kSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluCubic = 0.044715f;

inline float GeluTanh(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

inline float GeluTanhDerivative(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float t = std::tanh(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// exp(x) for x <= 0 (softmax terms after subtracting the row max), relative error below 3e-7;
// exactly 0 below -87.3 (where expf underflows anyway). Branch-free so that loops over it
// vectorise (glibc's expf does not without -ffast-math).
// Method: x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 Taylor polynomial, 2^n by
// building the exponent bits.
inline float ExpNonPositive(float x) {
  x = x < -87.3f ? -87.3f : x;
  // floor(v + 0.5) rather than round(v): it vectorises (AVX2 has no round-half-away).
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  // r = x - n ln2, with ln2 split in two parts for accuracy (Cody-Waite).
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x <= -87.3f ? 0.0f : p * scale;
}

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_FAST_MATH_H_
