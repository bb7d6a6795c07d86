// Matrix multiplication: C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T.
//
// Shapes (all contiguous, one device):
//   Gemm:         A [M, K] (or [K, M] with transpose_a), B [K, N] (or [N, K]), C [M, N]
//   BatchedGemm:  the same with a leading batch dimension on all three: [Bt, M, K] ...
// f32 everywhere; bf16 and f16 inputs/outputs are computed in f32 (accumulation in f32) on the CPU.
// beta = 0 ignores C's previous contents (NaNs included); beta = 1 accumulates into C.
// Errors: InvalidArgument on shape/rank/contiguity/device mismatches; Unimplemented for other
// dtypes or devices without a kernel.
#ifndef MT_CORE_OPS_GEMM_H_
#define MT_CORE_OPS_GEMM_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

enum class Transpose { kNo, kYes };

// Which CPU GEMM kernel runs. kDefault is the faster of the two on the machines we measured
// (docs/perf/gemm.md); the others exist for the benchmark and the tests.
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
