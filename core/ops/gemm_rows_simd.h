// A batch-invariant f32 GEMM for decoding (ExecContext::row_invariant_gemm): C = alpha A op(B) +
// beta C with A [M, K] row-major (not transposed) and B [K, N] or, transposed, [N, K]. Every
// element C[m, n] is one chain of fused multiply-adds over k = 0 .. K-1 in order, computed by the
// same instructions whatever M is, wherever row m sits and whatever the other rows hold: a row's
// result depends only on that row of A (and B). BLAS GEMMs do not promise that (OpenBLAS's
// kernels block the rows by 12, 8, 4 and 1, each block summing differently;
// //core/ops:gemm_test shows it), so a batched decoding step would round a sequence's logits
// differently from the same sequence decoded alone.
//
// Blocking: 16-byte-aligned panels of B, 2 vectors of columns wide (zero-padded), times blocks of
// 4 rows of A (zero-padded); the panels are split over `pool`'s threads. With FMA at every SIMD
// target but the baseline, where a multiply-add rounds twice (the same for every row again).
#ifndef MT_CORE_OPS_GEMM_ROWS_SIMD_H_
#define MT_CORE_OPS_GEMM_ROWS_SIMD_H_

#include <cstdint>

#include "core/thread_pool.h"

namespace mt {
namespace ops {
namespace internal {

void RowInvariantGemmF32(ThreadPool* pool, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* a, const float* b, bool trans_b, float beta, float* c);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_GEMM_ROWS_SIMD_H_
