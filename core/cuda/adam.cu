// Adam / AdamW on f32 master weights. Every operation is an explicitly rounded intrinsic
// (__fmul_rn, __fadd_rn, ...), which nvcc never contracts into fused multiply-adds: the update is
// the sequence of f32 roundings written in core/ops/adam.h, as the CPU kernel computes it.
#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace {

__global__ void AdamKernel(float* param, const float* grad, float* m, float* v, int64_t n,
                           AdamConstants a) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float p = param[i];
    float g = __fmul_rn(grad[i], a.grad_scale);
    if (!a.decoupled) g = __fadd_rn(g, __fmul_rn(a.weight_decay, p));
    const float mi = __fadd_rn(__fmul_rn(a.beta1, m[i]), __fmul_rn(a.one_minus_beta1, g));
    const float vi =
        __fadd_rn(__fmul_rn(a.beta2, v[i]), __fmul_rn(a.one_minus_beta2, __fmul_rn(g, g)));
    m[i] = mi;
    v[i] = vi;
    const float m_hat = __fdiv_rn(mi, a.bias_correction1);
    const float v_hat = __fdiv_rn(vi, a.bias_correction2);
    const float update = __fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), a.eps));
    param[i] = a.decoupled
                   ? __fsub_rn(p, __fmul_rn(a.lr, __fadd_rn(update, __fmul_rn(a.weight_decay, p))))
                   : __fsub_rn(p, __fmul_rn(a.lr, update));
  }
}

}  // namespace

LaunchResult LaunchAdam(float* param, const float* grad, float* m, float* v, int64_t n,
                        const AdamConstants& params, void* stream) {
  if (n == 0) return {};
  MT_LAUNCH(GridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream), AdamKernel)
  (param, grad, m, v, n, params);
  MT_CHECK_LAUNCH();
  return {};
}

}  // namespace cuda
}  // namespace mt
