// The packed GEMM behind CpuGemmBackend::kPacked (gemm.h): our own blocked f32 product for x86
// CPUs with AVX2 and FMA, written for 16-bit operands on CPUs that have no bf16 instructions.
//
// OpenBLAS and Eigen multiply only f32, so a bf16 operand headed for them is first widened into an
// f32 copy (gemm_cpu.h), which they then read again to copy it into their own packed blocks. Here
// the widening happens inside the packing: a block of op(A) or op(B) is read in its stored dtype
// (2 bytes per element for bf16) and written once, as f32, in the layout the register kernel
// reads. The blocking is the usual one for a 6 x 16 AVX2 kernel (12 accumulators of 8 floats):
// op(A) in blocks of 144 x 384 (in L2), op(B) in panels of 384 x 16 (in L1), each panel packed
// just before its first use so that the packing overlaps the arithmetic; K goes in blocks of 384
// whose partial products are added into C in order. Every thread owns a range of C's columns (or
// of its rows when M > N) and packs what it needs: the result does not depend on the thread
// count, and no C element is summed in a different order by a different split.
//
// Internal to //core/ops:gemm.
#ifndef MT_CORE_OPS_GEMM_PACKED_H_
#define MT_CORE_OPS_GEMM_PACKED_H_

#include "core/cpu_features.h"
#include "core/exec_context.h"
#include "core/gemm_shape.h"

namespace mt {
namespace ops {
namespace internal {

// Whether PackedGemm can run on a CPU with `features` (AVX2 and FMA usable).
bool PackedGemmSupported(const CpuFeatures& features);

// C = alpha op(A) op(B) + beta C for every batch entry, row-major and contiguous as in gemm.h, with
// an f32 C; TA and TB are float, bf16 or f16 (each widened exactly to f32 while packed; f16 element
// by element, as no F16C is assumed). beta = 0 never reads C; K = 0 or alpha = 0 reads neither A
// nor B. Runs on ctx.pool. The caller has checked PackedGemmSupported.
template <typename TA, typename TB>
void PackedGemm(const ExecContext& ctx, const GemmShape& s, float alpha, const TA* a, const TB* b,
                float beta, float* c);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_GEMM_PACKED_H_
