// The f32 constants of one Adam/AdamW update (core/ops/adam.h's formulas), shared by the CPU's
// SIMD loop and the CUDA kernel so that both apply the same roundings: one_minus_beta* and
// bias_correction* (1 - beta^step, rounded to f32) are computed once by the caller.
#ifndef MT_CORE_ADAM_CONSTANTS_H_
#define MT_CORE_ADAM_CONSTANTS_H_

namespace mt {

struct AdamConstants {
  float lr = 0.0f, beta1 = 0.0f, beta2 = 0.0f, eps = 0.0f, weight_decay = 0.0f;
  float one_minus_beta1 = 0.0f, one_minus_beta2 = 0.0f;
  float bias_correction1 = 1.0f, bias_correction2 = 1.0f;  // 1 - beta^step, rounded to f32.
  float grad_scale = 1.0f;
  bool decoupled = true;  // AdamW (decoupled weight decay).
};

}  // namespace mt

#endif  // MT_CORE_ADAM_CONSTANTS_H_
