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
// kernel it runs is chosen from the CPU's features, core/openblas.h) or libdnnl (kOneDnn asked for
// by name; core/onednn.h), Internal when oneDNN fails a call; Unimplemented for other
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
// Mixed operands (CPU only): one of A and B f32, the other bf16 or f16; C and the bias then have
// the 16-bit dtype or f32. The 16-bit operand is widened and the f32 operand read in place: on
// the packed GEMM where kDefault sends the 16-bit dtype there (or when asked for), else on
// OpenBLAS (Eigen when asked for).
//
// CPU backends (CpuGemmBackend): OpenBLAS's sgemm, Eigen's GEMM, oneDNN's matmul, or our packed
// GEMM (gemm_packed.h: AVX2 and FMA, or AVX-512; 16-bit operands widened while packed). kDefault
// picks one per dtype from the CPU's features by the fixed rule of DefaultCpuGemmBackend (never by
// a timing, so results do not depend on a race): bf16 runs on oneDNN where the CPU multiplies bf16
// in hardware (AVX512-BF16 or AMX) and oneDNN loads, else on the packed GEMM (on OpenBLAS on a CPU
// without AVX2 and FMA); f32 and f16 on OpenBLAS. On OpenBLAS and Eigen, bf16/f16 operands are
// widened to f32 piece by piece (gemm_cpu.h); on oneDNN, bf16 runs natively where it has a kernel
// and is widened otherwise (f16 always: oneDNN 2.6 has no f16 CPU kernels), and a fused epilogue
// without pre_activation runs as oneDNN post-ops (its own tanh GeLU: within a few f32 roundings of
// ours, not bitwise). The packed GEMM is x86-64 only: FailedPrecondition when asked for on a CPU
// without AVX2 and FMA.
// CPU threads: ctx.num_threads() threads: OpenBLAS's pthreads, oneDNN's OpenMP threads (passive
// between calls, core/onednn.h) or ctx.pool for Eigen and the packed GEMM; the first two are
// process-wide counts that every call sets again, so calls from several threads at once must use
// the same thread count. bf16/f16 conversions and epilogues run on ctx.pool, between the backend's
// calls, never beside them.
#ifndef MT_CORE_OPS_GEMM_H_
#define MT_CORE_OPS_GEMM_H_

#include <string>

#include "absl/status/status.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

enum class Transpose { kNo, kYes };

// Which CPU GEMM kernel runs. kDefault: DefaultCpuGemmBackend's choice for the dtype. All four are
// tested, and //core/ops:gemm_bench compares them (docs/perf/gemm.md).
enum class CpuGemmBackend { kDefault, kEigen, kOpenBlas, kOneDnn, kPacked };

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

// The rule behind kDefault, measured (docs/perf/gemm.md): f32 and f16 on OpenBLAS (its f32 GEMM is
// ahead of Eigen's and oneDNN's f32 matmul on the AVX2 and AVX-512 machines measured); bf16 on
// oneDNN when the CPU has AVX512-BF16 or AMX-BF16 (oneDNN's bf16 kernels run at about twice the f32
// rate there); else on the packed GEMM, which runs at about OpenBLAS's f32 rate without a separate
// widening pass (on OpenBLAS after widening where the CPU lacks AVX2 and FMA).
// Pure: the features decide, not whether libdnnl is installed (see ResolveCpuGemmBackend).
CpuGemmBackend DefaultCpuGemmBackend(DType dtype, const CpuFeatures& features);

// The backend a call with `backend` and operands of `dtype` runs on in this process: kDefault
// resolved by the rule for the running CPU. bf16 goes to oneDNN only where the rule says so,
// libdnnl loads and it has a bf16 kernel (not under ONEDNN_MAX_CPU_ISA below AVX512_CORE: it would
// widen onto its own f32 matmul, which is slower); otherwise to the packed GEMM, as on a CPU
// without bf16 instructions.
CpuGemmBackend ResolveCpuGemmBackend(CpuGemmBackend backend, DType dtype);

// Whether CpuGemmBackend::kPacked runs on this CPU (x86-64 with AVX2 and FMA).
bool PackedGemmAvailable();

// The name printed by benchmarks: "eigen", "openblas", "onednn" or "packed" (kDefault resolved for
// f32).
const char* CpuGemmBackendName(CpuGemmBackend backend);

// How `dtype` operands are multiplied on this CPU with kDefault, e.g. "openblas", "openblas,
// widened to f32", "packed, widened to f32 while packed" or "onednn (brg:avx512_core_bf16)".
std::string CpuGemmRoute(DType dtype);

// One line for start-up logs: the route of each dtype and the reason, e.g. "f32: openblas; bf16:
// openblas, widened to f32 (no AVX512-BF16 or AMX); f16: openblas, widened to f32".
std::string DescribeCpuGemm();

// Nonzero while this thread is inside a oneDNN GEMM. oneDNN's kernels are JIT code, with no
// symbols and no unwind tables, so a sampling profiler cannot name them from the stack; it reads
// this from its signal handler on the sampled thread instead (jobs/bench/step_profile.h).
int OneDnnCallsOnThisThread();

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_GEMM_H_
