// The CPU kernels behind ops::Gemm (gemm.h): f32 products on Eigen or OpenBLAS, the piecewise
// widening of bf16/f16 operands for them, and the fused epilogue. Internal to //core/ops:gemm.
#ifndef MT_CORE_OPS_GEMM_CPU_H_
#define MT_CORE_OPS_GEMM_CPU_H_

#include <cstdint>
#include <vector>

#include "core/exec_context.h"
#include "core/gemm_shape.h"
#include "core/ops/gemm.h"
#include "core/tensor.h"

namespace mt {
namespace ops {
namespace internal {

// All batch entries of contiguous f32 operands on `backend` (kEigen or kOpenBlas), C = alpha
// op(A) op(B) + beta C. Degenerate problems are handled here so the backends agree: with K = 0 or
// alpha = 0 the product is zero and A and B are not read (as in BLAS).
void GemmF32(CpuGemmBackend backend, const ExecContext& ctx, const GemmShape& s, float alpha,
             const float* a, const float* b, float beta, float* c);

// The same for bf16 or f16 operands and an f32 C: each 16-bit operand (TA, TB: bf16, f16 or
// float, at least one of them 16-bit) is widened to f32 piece by piece into reused scratch, each
// piece a few MiB along the problem's largest dimension (M, N or K; along K the partial products
// accumulate into C), so that the widened operand stays in the caches instead of a full f32 copy
// going to memory and back; an f32 operand is read in place. Splitting M or N leaves every C
// element's sum as the unsplit product computes it; splitting K (only when K is the largest
// dimension) changes where the f32 partial sums are rounded, by the problem's own fixed rule.
template <typename TA, typename TB>
void WidenedGemm(CpuGemmBackend backend, const ExecContext& ctx, const GemmShape& s, float alpha,
                 const TA* a, const TB* b, float beta, float* c);

// dst[i] = float(src[i]) / T(src[i]) for i < n, split over ctx.pool.
template <typename T>
void Widen(ThreadPool* pool, const T* src, int64_t n, float* dst);
template <typename T>
void Narrow(ThreadPool* pool, const float* src, int64_t n, T* dst);

// The bias in f32 (empty without one).
std::vector<float> WidenedBias(const TensorView* bias);

// The epilogue (gemm.h) over the f32 product p [M, N] (which may be C's own storage when Out =
// float): bias, GeLU, pre_activation, each output rounded once to Out. Split over rows on the
// pool: element-wise, so the result does not depend on the thread count.
template <typename Out>
void ApplyEpilogue(ThreadPool* pool, const GemmShape& s, const GemmOptions& options, const float* p,
                   Out* c, Out* pre);

// Uninitialised f32 scratch of at least n floats, reused by the calling thread; blocks up to
// kKeptScratchBytes stay allocated between calls (larger ones are freed when the slot is next
// asked for less). `slot` 0..2 names independent buffers.
float* Scratch(int slot, int64_t n);
inline constexpr int64_t kKeptScratchBytes = int64_t{64} << 20;

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_GEMM_CPU_H_
