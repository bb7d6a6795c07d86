// Host side of the modern decoder ops (core/ops/rmsnorm.h, rope.h, swiglu.h): entry checks,
// scratch and launches. The kernels are in rmsnorm.cu, rope.cu and swiglu.cu.
#include <cstdint>

#include "core/cuda/op_util.h"
#include "core/cuda/ops_cuda.h"
#include "core/status.h"

namespace mt {
namespace cuda {

absl::Status RmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                     float eps, const TensorView& y, const TensorView& rstd) {
  constexpr absl::string_view kOp = "RmsNorm";
  RETURN_IF_ERROR(Enter(kOp, ctx, x.device, MT_OPERANDS(x, gamma, y, rstd), Needs::kNothing));
  const int64_t cols = x.dim(-1);
  return LaunchStatus(
      kOp, LaunchRmsNorm(Elem(x.dtype), Elem(gamma.dtype), x.data, gamma.data, eps, y.data,
                         rstd.data_as<float>(), x.numel() / cols, cols, ctx.cuda_stream));
}

absl::Status RmsNormBackward(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                             const TensorView& rstd, const TensorView& dy, const TensorView& dx,
                             const TensorView& dgamma) {
  constexpr absl::string_view kOp = "RmsNormBackward";
  RETURN_IF_ERROR(Enter(kOp, ctx, x.device, MT_OPERANDS(x, gamma, rstd, dy, dx, dgamma),
                        Needs::kDeviceContext));
  const int64_t cols = x.dim(-1);
  const int64_t rows = x.numel() / cols;
  const size_t bytes =
      static_cast<size_t>(RmsNormBackwardScratchFloats(rows, cols)) * sizeof(float);
  absl::StatusOr<void*> scratch = ctx.cuda->state().Scratch(bytes);
  if (!scratch.ok()) return WithOp(kOp, scratch.status());
  return LaunchStatus(
      kOp, LaunchRmsNormBackward(Elem(x.dtype), Elem(gamma.dtype), x.data, gamma.data,
                                 rstd.data_as<float>(), dy.data, dx.data, dgamma.data, rows, cols,
                                 static_cast<float*>(*scratch), ctx.cuda_stream));
}

absl::Status Rope(absl::string_view op, const ExecContext& ctx, const TensorView& x, double base,
                  int64_t position_offset, float sign, const TensorView& y) {
  RETURN_IF_ERROR(Enter(op, ctx, x.device, MT_OPERANDS(x, y), Needs::kNothing));
  RopeParams p;
  p.seq = x.dim(-2);
  p.head_dim = x.dim(-1);
  p.outer = p.seq * p.head_dim == 0 ? 0 : x.numel() / (p.seq * p.head_dim);
  p.base = base;
  p.position_offset = position_offset;
  p.sign = sign;
  return LaunchStatus(op, LaunchRope(Elem(x.dtype), x.data, y.data, p, ctx.cuda_stream));
}

absl::Status SwiGlu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                    const TensorView& y) {
  constexpr absl::string_view kOp = "SwiGlu";
  RETURN_IF_ERROR(Enter(kOp, ctx, gate.device, MT_OPERANDS(gate, up, y), Needs::kNothing));
  return LaunchStatus(kOp, LaunchSwiGlu(Elem(gate.dtype), gate.data, up.data, y.data, gate.numel(),
                                        ctx.cuda_stream));
}

absl::Status SwiGluBackward(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                            const TensorView& dy, const TensorView& dgate, const TensorView& dup) {
  constexpr absl::string_view kOp = "SwiGluBackward";
  RETURN_IF_ERROR(
      Enter(kOp, ctx, gate.device, MT_OPERANDS(gate, up, dy, dgate, dup), Needs::kNothing));
  return LaunchStatus(
      kOp, LaunchSwiGluBackward(Elem(gate.dtype), gate.data, up.data, dy.data, dgate.data, dup.data,
                                gate.numel(), ctx.cuda_stream));
}

}  // namespace cuda
}  // namespace mt
