// Element types and exact conversions between float and the 16-bit float formats.
//
// bf16 and f16 are stored as their raw 16-bit patterns. FloatTo* round to nearest, ties to even,
// keep NaN a (quiet) NaN and overflow to infinity as IEEE 754 requires; *ToFloat are exact.
#ifndef MT_CORE_DTYPE_H_
#define MT_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU16 };

// Bytes per element.
size_t DTypeSize(DType dtype);
// "f32", "bf16", "f16", "i32", "i64", "u16".
absl::string_view DTypeName(DType dtype);
// Parses a name as printed by DTypeName; InvalidArgument for anything else.
absl::StatusOr<DType> ParseDType(absl::string_view name);
// True for f32, bf16 and f16.
bool IsFloating(DType dtype);
// True for i32, i64 and u16.
bool IsInteger(DType dtype);

// A bfloat16 value (1 sign, 8 exponent, 7 mantissa bits).
struct bf16 {
  uint16_t bits;
};
// An IEEE 754 binary16 value (1 sign, 5 exponent, 10 mantissa bits).
struct f16 {
  uint16_t bits;
};

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float Bf16ToFloat(bf16 h) { return BitsToFloat(static_cast<uint32_t>(h.bits) << 16); }

inline bf16 FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload, force quiet.
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  // Round to nearest even on the 16 discarded bits. Overflow carries into the exponent and
  // yields infinity, which is the correctly rounded result.
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding) >> 16)};
}

float HalfToFloat(f16 h);
f16 FloatToHalf(float f);

// Conversions used by templated kernels: Load<T> widens to float, Store<T> narrows from float.
template <typename T>
inline float ToFloat(T v) {
  return static_cast<float>(v);
}
template <>
inline float ToFloat<bf16>(bf16 v) {
  return Bf16ToFloat(v);
}
template <>
inline float ToFloat<f16>(f16 v) {
  return HalfToFloat(v);
}

template <typename T>
inline T FromFloat(float v) {
  return static_cast<T>(v);
}
template <>
inline bf16 FromFloat<bf16>(float v) {
  return FloatToBf16(v);
}
template <>
inline f16 FromFloat<f16>(float v) {
  return FloatToHalf(v);
}

// The DType of a C++ element type.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<f16> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::kU16;
};

}  // namespace mt

#endif  // MT_CORE_DTYPE_H_
