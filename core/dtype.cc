#include "core/dtype.h"

#include "absl/strings/str_cat.h"

namespace mt {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
    case DType::kU16:
      return 2;
    case DType::kI64:
      return 8;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU16:
      return "u16";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "'; expected one of f32, bf16, f16, i32, i64, u16"));
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

bool IsInteger(DType dtype) { return !IsFloating(dtype); }

float HalfToFloat(f16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1f) {  // Inf or NaN.
    return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  }
  if (exp != 0) {  // Normal: rebias 15 -> 127.
    return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  }
  if (mant == 0) return BitsToFloat(sign);  // Signed zero.
  // Subnormal: value = mant * 2^-24, normalise the mantissa.
  int e = -1;
  do {
    ++e;
    mant <<= 1;
  } while ((mant & 0x400u) == 0);
  mant &= 0x3ffu;
  return BitsToFloat(sign | ((112u - e) << 23) | (mant << 13));
}

f16 FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet.
    return f16{static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};
  }
  if (abs >= 0x477ff000u) {  // >= 65520 rounds to infinity (65504 is the largest finite).
    return f16{static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (abs >= 0x38800000u) {  // Normal in f16 (>= 2^-14).
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even;
    // a carry out of the mantissa correctly bumps the exponent.
    uint32_t v = abs - (112u << 23);
    v += 0xfffu + ((v >> 13) & 1u);
    return f16{static_cast<uint16_t>(sign | (v >> 13))};
  }
  if (abs < 0x33000000u) {  // Below half the smallest subnormal (2^-25): rounds to zero.
    return f16{sign};
  }
  // Subnormal in f16: value = m * 2^-24 with m in [1, 1023]. Shift the full 24-bit significand
  // into place and round to nearest even.
  const uint32_t exp = abs >> 23;  // 102..112
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exp;  // 14..24
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (m & 1u))) ++m;
  return f16{static_cast<uint16_t>(sign | m)};
}

}  // namespace mt
