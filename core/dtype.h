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
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU16 };
// The float dtypes by name, for enum settings (core/fields.h): "f32", "bf16", "f16".
inline constexpr std::pair<absl::string_view, DType> kFloatDTypeNames[] = {
    {"f32", DType::kF32}, {"bf16", DType::kBF16}, {"f16", DType::kF16}};

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

// Conversions used by templated kernels: ToFloat<T> widens to float, FromFloat<T> narrows from
// float (round to nearest even for the 16-bit floats).
template <typename T>
inline float ToFloat(T v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return Bf16ToFloat(v);
  } else if constexpr (std::is_same_v<T, f16>) {
    return HalfToFloat(v);
  } else {
    return static_cast<float>(v);
  }
}

template <typename T>
inline T FromFloat(float v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return FloatToBf16(v);
  } else if constexpr (std::is_same_v<T, f16>) {
    return FloatToHalf(v);
  } else {
    return static_cast<T>(v);
  }
}

// The DType of a C++ element type: DTypeOf<bf16>::value == DType::kBF16; float, bf16, f16,
// int32_t, int64_t and uint16_t only.
template <typename T>
struct DTypeOf {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, f16> ||
                    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                    std::is_same_v<T, uint16_t>,
                "DTypeOf: not the element type of a DType");
  static constexpr DType value = std::is_same_v<T, float>     ? DType::kF32
                                 : std::is_same_v<T, bf16>    ? DType::kBF16
                                 : std::is_same_v<T, f16>     ? DType::kF16
                                 : std::is_same_v<T, int32_t> ? DType::kI32
                                 : std::is_same_v<T, int64_t> ? DType::kI64
                                                              : DType::kU16;
};

}  // namespace mt

#endif  // MT_CORE_DTYPE_H_
