#include "core/ops/adam.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
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

void AdamCpu(ThreadPool* pool, float* param, const float* grad, float* m, float* v, int64_t n,
             const AdamArgs& a) {
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), a.step));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), a.step));
  const float b1 = a.beta1, b2 = a.beta2, one_minus_b1 = 1.0f - a.beta1,
              one_minus_b2 = 1.0f - a.beta2;
  const float lr = a.lr, eps = a.eps, wd = a.weight_decay, scale = a.grad_scale;
  const bool decoupled = a.mode == WeightDecayMode::kAdamW;
  ParallelFor(pool, n, int64_t{1} << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float p = param[i];
      float g = grad[i] * scale;
      if (!decoupled) g += wd * p;
      const float mi = b1 * m[i] + one_minus_b1 * g;
      const float vi = b2 * v[i] + one_minus_b2 * (g * g);
      m[i] = mi;
      v[i] = vi;
      const float m_hat = mi / bc1;
      const float v_hat = vi / bc2;
      const float update = m_hat / (std::sqrt(v_hat) + eps);
      param[i] = decoupled ? p - lr * (update + wd * p) : p - lr * update;
    }
  });
}

}  // namespace

absl::Status AdamUpdate(const ExecContext& ctx, const TensorView& param, const TensorView& grad,
                        const TensorView& m, const TensorView& v, const AdamArgs& args) {
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
  RETURN_IF_ERROR(CheckHyperparameters(args));
#if defined(MT_WITH_CUDA)
  if (param.device.is_cuda()) {
    // The same f32 constants as AdamCpu, so the kernel's update is the CPU's.
    cuda::AdamParams p;
    p.lr = args.lr;
    p.beta1 = args.beta1;
    p.beta2 = args.beta2;
    p.one_minus_beta1 = 1.0f - args.beta1;
    p.one_minus_beta2 = 1.0f - args.beta2;
    p.eps = args.eps;
    p.weight_decay = args.weight_decay;
    p.grad_scale = args.grad_scale;
    p.bias_correction1 =
        static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta1), args.step));
    p.bias_correction2 =
        static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta2), args.step));
    p.decoupled = args.mode == WeightDecayMode::kAdamW;
    return cuda::AdamUpdate(ctx, param, grad, m, v, p);
  }
#endif
  if (!param.device.is_cpu()) return UnsupportedDevice(kOp, param.device);
  AdamCpu(ctx.pool, param.data_as<float>(), grad.data_as<float>(), m.data_as<float>(),
          v.data_as<float>(), param.numel(), args);
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
