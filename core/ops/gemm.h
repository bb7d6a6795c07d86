// Matrix multiplication: C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T.
//
// Shapes (all contiguous, one device):
//   Gemm:         A [M, K] (or [K, M] with transpose_a), B [K, N] (or [N, K]), C [M, N]
//   BatchedGemm:  the same with a leading batch dimension on all three: [Bt, M, K] ...
// Dtypes: A and B share one float dtype (f32, bf16, f16); C has that dtype, or is f32 when A and B
// are bf16/f16 (mixed precision: the product is accumulated in f32 and written to the f32 C without
// a 16-bit rounding, so beta = 1 accumulates weight gradients into f32 "main grads"). bf16 and f16
// inputs are computed in f32 (accumulation in f32) on the CPU; a 16-bit C is rounded once.
// beta = 0 ignores C's previous contents (NaNs included); beta = 1 accumulates into C. With K = 0
// or alpha = 0, A and B are not read and C = beta * C. C must not overlap A or B.
// Errors: InvalidArgument on shape/rank/contiguity/device/dtype mismatches (A and B differ, or C is
// neither A's dtype nor f32), on C overlapping A or B, and for dimensions above 2^31 - 1 on the
// OpenBLAS backend; FailedPrecondition when libopenblas cannot be loaded (OpenBLAS backend; the
// kernel it runs is chosen from the CPU's features, core/openblas.h); Unimplemented for other
// dtypes (and CUDA tensors in CPU-only builds or without a device). CUDA tensors run on cuBLASLt
// with f32 accumulation and need ctx.cuda (core/cuda).
//
// Fused epilogues (Gemm only; GemmOptions::bias, epilogue, pre_activation), for beta = 0:
//   P = alpha op(A) op(B) + bias   (bias[n] added to every row m; no bias: P = alpha op(A) op(B))
//   C = P (Epilogue::kNone) or C = GeLU(P) (Epilogue::kGelu: 0.5 P (1 + tanh(sqrt(2/pi) (P +
//       0.044715 P^3))), the tanh approximation of ops::Gelu)
//   pre_activation = P (optional, kGelu only: what ops::GeluBackward needs).
// bias: [N], contiguous, A's dtype or f32, C's device, not overlapping C or pre_activation.
// pre_activation: [M, N], contiguous, C's dtype and device, overlapping none of A, B, C, bias.
// P is formed and GeLU'd in f32 and C (and pre_activation) rounded once to its dtype. On the CPU
// an f32 C is therefore bitwise Gemm followed by ops::BiasAdd and ops::Gelu; a 16-bit C is rounded
// once instead of after each step. On CUDA, cuBLASLt's epilogues (CUBLASLT_EPILOGUE_BIAS,
// GELU_BIAS, GELU_AUX_BIAS, ...) run where cuBLASLt has a kernel for the shape and alignment and
// the bias has C's dtype, bias and pre_activation are 16-byte aligned and, with pre_activation, N
// is a multiple of 8; otherwise the product goes to f32 (device scratch of M N floats for a 16-bit
// C) and the CUDA BiasAdd and Gelu kernels follow, with the same single rounding. cuBLASLt
// evaluates GeLU with its own tanh, so CUDA results may differ from the CPU's by slightly more than
// f32 rounding. Errors (InvalidArgument): an epilogue with BatchedGemm or beta != 0; pre_activation
// without Epilogue::kGelu; a bias or pre_activation of the wrong shape, dtype or device,
// non-contiguous, or overlapping as above.
//
// CPU threads: ctx.num_threads() threads, run by the backend's own threads (OpenMP for Eigen,
// OpenBLAS's pthreads), whose counts are process-wide settings that every call sets again; so
// calls from several threads at once must use the same thread count. bf16/f16 conversions run on
// ctx.pool, and so do epilogues (split over rows).
#ifndef MT_CORE_OPS_GEMM_H_
#define MT_CORE_OPS_GEMM_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

enum class Transpose { kNo, kYes };

// Which CPU GEMM kernel runs. kDefault is the faster of the two on the machines we measured:
// OpenBLAS's sgemm (docs/perf/gemm.md: on a 2-core AVX2/FMA EPYC, Eigen 3.4 reaches about 87% of
// OpenBLAS's rate over the GEMMs of a GPT-2 layer, and OpenBLAS is ahead on 24 of 25 shapes).
// kEigen is Eigen's own GEMM (OpenMP); both are tested, and the benchmark compares them.
enum class CpuGemmBackend { kDefault, kEigen, kOpenBlas };

// The element-wise function applied to the product (plus bias) before it is stored in C.
enum class Epilogue {
  kNone,
  kGelu,  // The tanh approximation of ops::Gelu.
};

struct GemmOptions {
  Transpose transpose_a = Transpose::kNo;
  Transpose transpose_b = Transpose::kNo;
  float alpha = 1.0f;
  float beta = 0.0f;
  CpuGemmBackend cpu_backend = CpuGemmBackend::kDefault;
  // The fused epilogue (see the top of the file); not owned, must outlive the call.
  const TensorView* bias = nullptr;  // [N], A's dtype or f32; null: no bias.
  Epilogue epilogue = Epilogue::kNone;
  const TensorView* pre_activation = nullptr;  // [M, N], C's dtype; only with kGelu.
};

absl::Status Gemm(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                  const TensorView& c, const GemmOptions& options = {});

absl::Status BatchedGemm(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                         const TensorView& c, const GemmOptions& options = {});

// The name printed by benchmarks: "eigen" or "openblas" (kDefault resolves to one of them).
const char* CpuGemmBackendName(CpuGemmBackend backend);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_GEMM_H_
