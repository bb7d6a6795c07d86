// The oneDNN matmul behind CpuGemmBackend::kOneDnn (gemm.h): one primitive per problem, created
// on first use and kept in a bounded cache keyed by everything that shapes it. Internal to
// //core/ops:gemm.
#ifndef MT_CORE_OPS_GEMM_ONEDNN_H_
#define MT_CORE_OPS_GEMM_ONEDNN_H_

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/gemm_shape.h"

namespace mt {
namespace ops {
namespace internal {

// One (batched) product as oneDNN runs it: C = alpha op(A) op(B) [+ bias] [GeLU], or
// C = alpha op(A) op(B) + beta C. A and B share `ab` (f32 or bf16), C is `c` (f32 or ab), a bias
// (null: none) is [N] of `bias_dtype`, fused only with alpha = 1 (oneDNN scales the bias too);
// GeLU is oneDNN's tanh approximation (a post-op). beta != 0 excludes a bias and GeLU.
struct OneDnnProblem {
  GemmShape shape;
  DType ab = DType::kF32, c = DType::kF32, bias_dtype = DType::kF32;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false, gelu = false;
};

// Runs the problem on `num_threads` OpenMP threads. FailedPrecondition when libdnnl cannot be
// loaded; Unimplemented when oneDNN has no kernel for these dtypes on this CPU (bf16 below
// AVX-512 in oneDNN 2.6, or with ONEDNN_MAX_CPU_ISA capping it so).
absl::Status OneDnnMatmul(const OneDnnProblem& p, int num_threads, const void* a, const void* b,
                          void* c, const void* bias);

// Whether oneDNN has a bf16 x bf16 -> `c` matmul kernel on this CPU (probed once per dtype).
bool OneDnnHasBf16Kernel(DType c);

// The implementation oneDNN picks for a bf16 product, e.g. "brg:avx512_core_bf16" or
// "gemm:jit", or why there is none (for start-up lines and benchmarks).
const char* OneDnnBf16Implementation();

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_GEMM_ONEDNN_H_
