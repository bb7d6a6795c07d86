#include "core/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/activation_check.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace {

using internal::DispatchFloat;

// Elements per ParallelFor chunk.
constexpr int64_t kChunkElements = 1 << 14;

// cos and sin of the angles of positions offset .. offset + T - 1: [T, D/2] each, in double and
// rounded once to f32 (rope.h); sin negated for the backward (sign = -1).
struct RotationTable {
  std::vector<float> cos, sin;
};

RotationTable MakeTable(const ExecContext& ctx, int64_t T, int64_t D, const RopeArgs& args,
                        float sign) {
  const int64_t half = D / 2;
  RotationTable table{std::vector<float>(T * half), std::vector<float>(T * half)};
  std::vector<double> theta(half);
  for (int64_t i = 0; i < half; ++i) {
    theta[i] = std::pow(args.base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
  }
  ParallelFor(ctx.pool, T, std::max<int64_t>(1, 256 / half), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const double p = static_cast<double>(args.position_offset + t);
      for (int64_t i = 0; i < half; ++i) {
        const double a = p * theta[i];
        table.cos[t * half + i] = static_cast<float>(std::cos(a));
        table.sin[t * half + i] = sign * static_cast<float>(std::sin(a));
      }
    }
  });
  return table;
}

// Rotates every row of x [R, D] (row r at position index r % T) into y; y may alias x.
template <typename T>
void RotateCpu(const ExecContext& ctx, const TensorView& x, const RotationTable& table, int64_t seq,
               const TensorView& y) {
  const int64_t D = x.dim(-1), half = D / 2, R = x.numel() / D;
  const T* px = x.data_as<T>();
  T* py = y.data_as<T>();
  ParallelFor(ctx.pool, R, std::max<int64_t>(1, kChunkElements / D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* c = table.cos.data() + (r % seq) * half;
      const float* s = table.sin.data() + (r % seq) * half;
      const T* in = px + r * D;
      T* out = py + r * D;
      for (int64_t i = 0; i < half; ++i) {
        const float u = ToFloat(in[i]), v = ToFloat(in[i + half]);
        out[i] = FromFloat<T>(u * c[i] - v * s[i]);
        out[i + half] = FromFloat<T>(v * c[i] + u * s[i]);
      }
    }
  });
}

// The forward (sign 1: x, y) or the backward (sign -1: dy, dx).
struct Direction {
  absl::string_view op, in, out;
  float sign;
};
constexpr Direction kForward{"Rope", "x", "y", 1.0f};
constexpr Direction kBackward{"RopeBackward", "dy", "dx", -1.0f};

absl::Status RopeImpl(const Direction& dir, const ExecContext& ctx, const TensorView& x,
                      const RopeArgs& args, const TensorView& y) {
  const absl::string_view op = dir.op;
  const float sign = dir.sign;
  RETURN_IF_ERROR(internal::CheckFloatActivations(op, {{dir.in, &x}, {dir.out, &y}}));
  if (x.rank() < 2 || x.dim(-1) < 2 || x.dim(-1) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", dir.in, " (", x.DebugString(),
                     ") must be [..., T, D] with an even head dim D >= 2 (rotate-half pairs)"));
  }
  if (!(std::isfinite(args.base) && args.base > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": base = ", args.base, " must be finite and positive"));
  }
  if (args.position_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": position_offset = ", args.position_offset, " must be >= 0"));
  }
  MT_ROUTE_DEVICE(op, x, cuda::Rope(op, ctx, x, args.base, args.position_offset, sign, y));
  if (x.numel() == 0) return absl::OkStatus();
  const int64_t T = x.dim(-2), D = x.dim(-1);
  const RotationTable table = MakeTable(ctx, T, D, args, sign);
  DispatchFloat(x.dtype, [&](auto tag) { RotateCpu<decltype(tag)>(ctx, x, table, T, y); });
  return absl::OkStatus();
}

}  // namespace

absl::Status Rope(const ExecContext& ctx, const TensorView& x, const RopeArgs& args,
                  const TensorView& y) {
  return RopeImpl(kForward, ctx, x, args, y);
}

absl::Status RopeBackward(const ExecContext& ctx, const TensorView& dy, const RopeArgs& args,
                          const TensorView& dx) {
  return RopeImpl(kBackward, ctx, dy, args, dx);
}

}  // namespace ops
}  // namespace mt
