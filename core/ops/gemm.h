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
// OpenBLAS backend; Unimplemented for other dtypes (and CUDA tensors in CPU-only builds or without
// a device). CUDA tensors run on cuBLASLt with f32 accumulation and need ctx.cuda (core/cuda).
//
// CPU threads: ctx.num_threads() threads, run by the backend's own threads (OpenMP for Eigen,
// OpenBLAS's pthreads), whose counts are process-wide settings that every call sets again; so
// calls from several threads at once must use the same thread count. bf16/f16 conversions run on
// ctx.pool.
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

struct GemmOptions {
  Transpose transpose_a = Transpose::kNo;
  Transpose transpose_b = Transpose::kNo;
  float alpha = 1.0f;
  float beta = 0.0f;
  CpuGemmBackend cpu_backend = CpuGemmBackend::kDefault;
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
