#include "core/ops/tanh.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise_loops.h"
#include "core/status.h"
#include "glog/logging.h"

#if defined(MT_WITH_CUDA)
#include "core/cuda/ops_cuda.h"
#endif

namespace mt {
namespace ops {
namespace {

using internal::DispatchFloat;
using internal::MapBinary;
using internal::MapUnary;

inline float TanhF(float x) { return std::tanh(x); }
// (1 - t)(1 + t) rather than 1 - t^2: no cancellation error where |t| is close to 1.
inline float TanhGrad(float t, float dy) { return dy * ((1.0f - t) * (1.0f + t)); }

}  // namespace

absl::Status Tanh(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  constexpr absl::string_view kOp = "Tanh";
  RETURN_IF_ERROR(CheckMatching(kOp, {{"x", &x}, {"y", &y}}, kFloatDTypes));
#if defined(MT_WITH_CUDA)
  if (x.device.is_cuda()) return cuda::Tanh(ctx, x, y);
#endif
  if (!x.device.is_cpu()) return UnsupportedDevice(kOp, x.device);
  DispatchFloat(x.dtype, [&](auto tag) { MapUnary<decltype(tag)>(ctx, x, y, TanhF); });
  return absl::OkStatus();
}

absl::Status TanhBackward(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                          const TensorView& dx) {
  constexpr absl::string_view kOp = "TanhBackward";
  RETURN_IF_ERROR(CheckMatching(kOp, {{"y", &y}, {"dy", &dy}, {"dx", &dx}}, kFloatDTypes));
#if defined(MT_WITH_CUDA)
  if (y.device.is_cuda()) return cuda::TanhBackward(ctx, y, dy, dx);
#endif
  if (!y.device.is_cpu()) return UnsupportedDevice(kOp, y.device);
  DispatchFloat(y.dtype, [&](auto tag) { MapBinary<decltype(tag)>(ctx, y, dy, dx, TanhGrad); });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
