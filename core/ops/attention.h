// Fused scaled dot-product attention (flash-attention style): for each batch b and head h,
//   out[b, h, i, :] = sum_j dropout(P)[i, j] v[b, g, j, :],
//   P[i, :] = softmax_j(scale * q[b, h, i, :] . k[b, g, j, :]) over the visible keys j,
// where g = h / (NH / G) is the key/value group of query head h: k and v hold G heads, G dividing
// NH (grouped-query attention; G = NH is multi-head attention, G = 1 multi-query). The NH / G
// query heads of a group read the same k and v rows; nothing is repeated in memory, and the
// backward sums the gradients of a group's query heads into its dk and dv.
// computed over tiles of keys with an online softmax (running maximum and sum), so that the
// [Tq, Tk] probabilities are never stored. The log-sum-exp of each query row is saved for the
// backward, which recomputes the probabilities tile by tile.
//
// Semantics are those of the unfused chain that nn/attention.cc runs:
//   BatchedGemm(q, k^T) -> Softmax(scale, causal, padding mask) -> Dropout -> BatchedGemm(., v)
// (core/ops/gemm.h, softmax.h, elementwise.h), with the same masks: the results agree up to float
// rounding (the fused op keeps the scores and probabilities in f32 where the chain rounds them to
// the compute dtype). In detail:
// - Causal mask: query i (of Tq) sees key j iff j <= i + (Tk - Tq) (queries are the LAST Tq
//   positions of the keys), as in Softmax. Padding mask: i32 [B, Tk], 0 marks a padded key.
// - A query row with nothing visible (every key masked, or every visible score -inf) outputs
//   zeros, gets lse = -inf, and receives (and passes on) zero gradient.
// - Dropout on the probabilities: probability element (b, h, i, j) is kept iff
//   PhiloxUniform(seed, stream, DropoutKey(dropout, ((b * NH + h) * Tq + i) * Tk + j)) >= p
//   (core/philox.h, ops::DropoutKey), i.e. exactly the mask ops::Dropout draws for the
//   [B, NH, Tq, Tk] probabilities; kept elements are scaled by 1 / (1 - p). The softmax
//   normaliser is that of the probabilities before dropout. p = 0: no dropout.
//
// Shapes (row-major, contiguous, one device):
//   q, out, dq, dout:  [B, NH, Tq, D]      k, v, dk, dv:  [B, G, Tk, D]  (NH % G == 0)
//   lse:               [B, NH, Tq] f32     padding_mask:  [B, Tk] i32 (optional)
// q, k, v, out, dout, dq, dk, dv share one float dtype (f32, bf16, f16); math in f32 (one
// rounding of each output). Outputs must not overlap any input or each other.
// Devices: CPU (threads over (b, h, query tile) and (b, g, key tile) on ctx.pool; results are
// bitwise independent of the thread count; exp by core/ops/fast_math.h's polynomial, relative
// error below 3e-7) and CUDA in CUDA builds (core/cuda/attention.cu; head dim D <= 128 there,
// Unimplemented above it). Neither allocates device memory or keeps state between calls.
// Errors: InvalidArgument (naming the op and the tensor) for a rank other than 4, mismatched
// shapes (a k whose head count G does not divide NH among them), dtypes or devices, non-contiguous
// views, overlapping outputs, an lse that is not f32, a non-finite scale, a bad padding mask shape
// or bad dropout arguments (as ops::Dropout checks them); Unimplemented for non-float dtypes (the
// padding mask: not i32) or devices without a kernel.
#ifndef MT_CORE_OPS_ATTENTION_H_
#define MT_CORE_OPS_ATTENTION_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/ops/elementwise.h"
#include "core/ops/softmax.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

struct AttentionArgs {
  float scale = 1.0f;  // Usually 1 / sqrt(D).
  CausalMask causal = CausalMask::kNo;
  const TensorView* padding_mask = nullptr;  // Optional i32 [B, Tk].
  DropoutArgs dropout;                       // On the probabilities; p = 0: none.
};

// Writes out [B, NH, Tq, D] and lse [B, NH, Tq] (f32: log sum_j exp(scale * q_i . k_j) over the
// visible keys; -inf for a row with none).
absl::Status FusedAttention(const ExecContext& ctx, const TensorView& q, const TensorView& k,
                            const TensorView& v, const AttentionArgs& args, const TensorView& out,
                            const TensorView& lse);

// Overwrites dq, dk, dv with the gradients of a loss whose gradient with respect to out is dout,
// given the forward's inputs, its out and lse, and the same args (the dropout mask is drawn again,
// nothing else is stored). Uses D_i = sum_d dout[i, d] out[i, d] and dS = P o (dP - D_i), where
// dP = (dout v^T) o dropout mask / (1 - p): the gradient of the unfused chain.
absl::Status FusedAttentionBackward(const ExecContext& ctx, const TensorView& q,
                                    const TensorView& k, const TensorView& v, const TensorView& out,
                                    const TensorView& dout, const TensorView& lse,
                                    const AttentionArgs& args, const TensorView& dq,
                                    const TensorView& dk, const TensorView& dv);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ATTENTION_H_
