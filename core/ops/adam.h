// Adam / AdamW update of f32 parameters in place (the fp32 master weights under mixed precision).
//
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   m_hat = m / (1 - beta1^step);  v_hat = v / (1 - beta2^step)
//   kAdamW (decoupled): p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)
//   kAdamL2 (classic):  g += weight_decay * p before the moments, then p -= lr * m_hat / (...)
// grad_scale multiplies g first (e.g. 1 / loss_scale, or a clipping coefficient).
// param, grad, m, v: same shape, f32, contiguous, same device; m and v are updated in place.
//
// The bias corrections 1 - beta^step are computed in double (at small steps 1 - beta2^step is a
// difference of nearly equal numbers) and then rounded to f32; every per-element operation runs
// in f32, in the order written above. Elements are independent, so the result is bitwise
// identical for every thread count.
//
// Errors: InvalidArgument for step < 1, beta1 or beta2 outside [0, 1), a negative or non-finite
// lr, eps or weight_decay, shape mismatches, non-contiguous views or mixed devices; Unimplemented
// for dtypes other than f32 (and CUDA tensors in CPU-only builds or without a device). The CUDA
// kernel performs the same f32 roundings, in the same order.
#ifndef MT_CORE_OPS_ADAM_H_
#define MT_CORE_OPS_ADAM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

enum class WeightDecayMode { kAdamW, kAdamL2 };

struct AdamArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  WeightDecayMode mode = WeightDecayMode::kAdamW;
  int64_t step = 1;
  float grad_scale = 1.0f;
};

absl::Status AdamUpdate(const ExecContext& ctx, const TensorView& param, const TensorView& grad,
                        const TensorView& m, const TensorView& v, const AdamArgs& args);

// AdamUpdate, then the updated param rounded into `compute` (bf16 or f16, param's shape, its own
// memory): the mixed-precision step's master-to-compute-copy, bitwise ops::Convert(param,
// compute) after the update. On the CPU each chunk is rounded right after its update, while it is
// in cache, so the masters are not read from memory a second time; on a GPU it is the update
// followed by the conversion kernel.
absl::Status AdamUpdateAndRound(const ExecContext& ctx, const TensorView& param,
                                const TensorView& grad, const TensorView& m, const TensorView& v,
                                const AdamArgs& args, const TensorView& compute);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ADAM_H_
