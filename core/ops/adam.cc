#include "core/ops/adam.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/adam_simd.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace {

constexpr absl::string_view kOp = "AdamUpdate";

absl::Status CheckHyperparameters(const AdamArgs& a) {
  if (a.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": step is ", a.step, "; steps count from 1 (the first update)"));
  }
  auto in_unit = [](float b) { return b >= 0.0f && b < 1.0f; };  // False for NaN.
  if (!in_unit(a.beta1) || !in_unit(a.beta2)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": beta1 = ", a.beta1, " and beta2 = ", a.beta2, " must lie in [0, 1)"));
  }
  for (const auto& [name, value] : {std::pair<absl::string_view, float>{"lr", a.lr},
                                    {"eps", a.eps},
                                    {"weight_decay", a.weight_decay}}) {
    if (!(value >= 0.0f) || std::isinf(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": ", name, " = ", value, " must be finite and >= 0"));
    }
  }
  return absl::OkStatus();
}

// The constants of adam.h's formulas, rounded to f32 once (CPU and CUDA alike).
AdamConstants Constants(const AdamArgs& a) {
  AdamConstants c;
  c.beta1 = a.beta1;
  c.beta2 = a.beta2;
  c.one_minus_beta1 = 1.0f - a.beta1;
  c.one_minus_beta2 = 1.0f - a.beta2;
  c.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), a.step));
  c.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), a.step));
  c.lr = a.lr;
  c.eps = a.eps;
  c.weight_decay = a.weight_decay;
  c.grad_scale = a.grad_scale;
  c.decoupled = a.mode == WeightDecayMode::kAdamW;
  return c;
}

// The update of [0, n) on the pool; with a 16-bit `compute` (T), each chunk of the new param is
// also rounded into it right after its update.
template <typename T = float>
void AdamCpu(ThreadPool* pool, float* param, const float* grad, float* m, float* v, int64_t n,
             const AdamArgs& a, T* compute = nullptr) {
  const AdamConstants c = Constants(a);
  ParallelFor(pool, n, int64_t{1} << 14, [&](int64_t begin, int64_t end) {
    internal::AdamRange(c, param + begin, grad + begin, m + begin, v + begin, end - begin);
    if constexpr (!std::is_same_v<T, float>) {
      internal::FromF32(param + begin, end - begin, compute + begin);
    }
  });
}

absl::Status CheckAdamOperands(const TensorView& param, const TensorView& grad, const TensorView& m,
                               const TensorView& v, const AdamArgs& args) {
  RETURN_IF_ERROR(CheckSameDevice(kOp, {&param, &grad, &m, &v}));
  RETURN_IF_ERROR(CheckDType(kOp, "param", param, {DType::kF32}));
  RETURN_IF_ERROR(CheckDType(kOp, "grad", grad, {DType::kF32}));
  RETURN_IF_ERROR(CheckDType(kOp, "m", m, {DType::kF32}));
  RETURN_IF_ERROR(CheckDType(kOp, "v", v, {DType::kF32}));
  RETURN_IF_ERROR(CheckShape(kOp, "grad", grad, param.shape));
  RETURN_IF_ERROR(CheckShape(kOp, "m", m, param.shape));
  RETURN_IF_ERROR(CheckShape(kOp, "v", v, param.shape));
  RETURN_IF_ERROR(CheckContiguous(kOp, "param", param));
  RETURN_IF_ERROR(CheckContiguous(kOp, "grad", grad));
  RETURN_IF_ERROR(CheckContiguous(kOp, "m", m));
  RETURN_IF_ERROR(CheckContiguous(kOp, "v", v));
  return CheckHyperparameters(args);
}

}  // namespace

absl::Status AdamUpdate(const ExecContext& ctx, const TensorView& param, const TensorView& grad,
                        const TensorView& m, const TensorView& v, const AdamArgs& args) {
  RETURN_IF_ERROR(CheckAdamOperands(param, grad, m, v, args));
  // The same f32 constants as AdamCpu, so the kernel's update is the CPU's.
  MT_ROUTE_DEVICE(kOp, param, cuda::AdamUpdate(ctx, param, grad, m, v, Constants(args)));
  AdamCpu(ctx.pool, param.data_as<float>(), grad.data_as<float>(), m.data_as<float>(),
          v.data_as<float>(), param.numel(), args);
  return absl::OkStatus();
}

absl::Status AdamUpdateAndRound(const ExecContext& ctx, const TensorView& param,
                                const TensorView& grad, const TensorView& m, const TensorView& v,
                                const AdamArgs& args, const TensorView& compute) {
  RETURN_IF_ERROR(CheckAdamOperands(param, grad, m, v, args));
  RETURN_IF_ERROR(CheckSameDevice(kOp, {&param, &compute}));
  RETURN_IF_ERROR(CheckDType(kOp, "compute", compute, {DType::kBF16, DType::kF16}));
  RETURN_IF_ERROR(CheckShape(kOp, "compute", compute, param.shape));
  RETURN_IF_ERROR(CheckContiguous(kOp, "compute", compute));
  RETURN_IF_ERROR(CheckNoOverlap(kOp, {{"compute", &compute}},
                                 {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}}));
  if (param.device.is_cuda()) {
    RETURN_IF_ERROR(cuda::AdamUpdate(ctx, param, grad, m, v, Constants(args)));
    return cuda::Convert(ctx, param, compute);
  }
  if (!param.device.is_cpu()) return UnsupportedDevice(kOp, param.device);
  internal::DispatchFloat(compute.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      AdamCpu<T>(ctx.pool, param.data_as<float>(), grad.data_as<float>(), m.data_as<float>(),
                 v.data_as<float>(), param.numel(), args, compute.data_as<T>());
    }
  });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
