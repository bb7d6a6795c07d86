#include "core/ops/tanh.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "glog/logging.h"

#if defined(MT_WITH_CUDA)
#include "core/cuda/ops_cuda.h"
#endif

namespace mt {
namespace ops {
namespace {

// Elements per ParallelFor chunk (as elementwise.cc): scheduling costs nothing next to the work.
constexpr int64_t kGrain = 1 << 14;

using internal::DispatchFloat;

template <typename T>
void TanhCpu(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  const T* px = x.data_as<T>();
  T* py = y.data_as<T>();
  ParallelFor(ctx.pool, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) py[i] = FromFloat<T>(std::tanh(ToFloat(px[i])));
  });
}

template <typename T>
void TanhBackwardCpu(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                     const TensorView& dx) {
  const T* py = y.data_as<T>();
  const T* pdy = dy.data_as<T>();
  T* pdx = dx.data_as<T>();
  ParallelFor(ctx.pool, y.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float t = ToFloat(py[i]);
      // (1 - t)(1 + t) rather than 1 - t^2: no cancellation error where |t| is close to 1.
      pdx[i] = FromFloat<T>(ToFloat(pdy[i]) * ((1.0f - t) * (1.0f + t)));
    }
  });
}

}  // namespace

absl::Status Tanh(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  constexpr absl::string_view kOp = "Tanh";
  RETURN_IF_ERROR(CheckMatching(kOp, {{"x", &x}, {"y", &y}}, kFloatDTypes));
#if defined(MT_WITH_CUDA)
  if (x.device.is_cuda()) return cuda::Tanh(ctx, x, y);
#endif
  if (!x.device.is_cpu()) return UnsupportedDevice(kOp, x.device);
  DispatchFloat(x.dtype, [&](auto tag) { TanhCpu<decltype(tag)>(ctx, x, y); });
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
  DispatchFloat(y.dtype, [&](auto tag) { TanhBackwardCpu<decltype(tag)>(ctx, y, dy, dx); });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
