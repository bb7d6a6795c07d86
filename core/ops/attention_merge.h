// Merging partial attention results (ring attention, context parallelism): two attention outputs
// of the same queries over disjoint sets of keys, each with its log-sum-exp (as
// ops::FusedAttention writes them), combine into the attention over the union of the keys:
//   lse = log(exp(lse_a) + exp(lse_b))
//   out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b
// computed per query row in f64 from the f32 log-sum-exps (the larger one subtracted first) and
// rounded once to the dtype of out. A row with lse_b = -inf (no visible key in b) keeps a; one with
// lse_a = -inf takes b; both -inf stays a row of zeros with lse -inf.
//
// Shapes: out, out_b [R, D] viewed as any shape whose last dim is D (e.g. [B, NH, T, D]) in one
// float dtype; lse, lse_b f32 with out's shape less its last dim ([B, NH, T]). All contiguous, on
// one device. out and lse are read and overwritten (they may not overlap out_b or lse_b).
// Devices: CPU (threads on ctx.pool over rows; results independent of the thread count). Other
// devices: Unimplemented (context parallelism runs on the CPU).
// Errors: InvalidArgument for mismatched shapes, dtypes or devices, non-contiguous or overlapping
// views, an lse that is not f32; Unimplemented for a non-float out or another device.
#ifndef MT_CORE_OPS_ATTENTION_MERGE_H_
#define MT_CORE_OPS_ATTENTION_MERGE_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

// (out, lse) <- the merge of (out, lse) and (out_b, lse_b); see the file comment.
absl::Status AttentionMerge(const ExecContext& ctx, const TensorView& out, const TensorView& lse,
                            const TensorView& out_b, const TensorView& lse_b);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ATTENTION_MERGE_H_
