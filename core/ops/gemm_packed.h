// The packed GEMM behind CpuGemmBackend::kPacked (gemm.h): our own blocked f32 product for x86
// CPUs with AVX2 and FMA (and AVX-512), written for 16-bit operands on CPUs that have no bf16
// instructions.
//
// OpenBLAS and Eigen multiply only f32, so a bf16 operand headed for them is first widened into an
// f32 copy (gemm_cpu.h), which they then read again to copy it into their own packed blocks. Here
// the widening happens inside the packing: a block of op(A) or op(B) is read in its stored dtype
// (2 bytes per bf16 element) and written once, as f32, in the layout the register kernel reads.
// The blocking is the usual one for such kernels: a register tile of 6 x 16 floats with AVX2
// (12 YMM accumulators) or 12 x 32 with AVX-512 (24 ZMM accumulators), op(A) in blocks of 144 x
// 384 (in L2), op(B) in panels of 384 x 16 or 384 x 32, each panel packed just before its first
// use so that the packing overlaps the arithmetic; K goes in blocks of 384 whose partial products
// are added into C in order. The AVX-512 kernel runs where the CPU has AVX-512 and our SIMD
// kernels run at an AVX-512 target (core/simd.h: ScopedSimdTarget, `--simd_target=AVX2`, selects
// the AVX2 one). Every thread owns a range of C's columns (or of its rows when M > N) and packs
// what it needs, and every C element is summed in the same order by either kernel: the bits do
// not depend on the thread count or the instruction set.
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
