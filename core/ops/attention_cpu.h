// The CPU kernels of ops::FusedAttention and ops::FusedAttentionBackward (core/ops/attention.h):
// a tiled forward with an online softmax, and a backward in two passes that each own their
// outputs. Internal to core/ops; attention.cc validates the views and calls these.
#ifndef MT_CORE_OPS_ATTENTION_CPU_H_
#define MT_CORE_OPS_ATTENTION_CPU_H_

#include <algorithm>
#include <cstdint>

#include "core/exec_context.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"

namespace mt {
namespace ops {
namespace internal {

// The sizes and masks of one call, from views and args that attention.cc has checked.
struct AttentionProblem {
  int64_t B = 0, NH = 0, Tq = 0, Tk = 0, D = 0;
  int64_t G = 0;  // Key/value heads (groups); divides NH.
  float scale = 1.0f;
  bool causal = false;
  const int32_t* mask = nullptr;         // [B, Tk] in host memory, or null.
  const DropoutArgs* dropout = nullptr;  // Null when p = 0.
  float keep_scale = 1.0f;               // 1 / (1 - p), as DropoutCpu computes it.

  // Keys [0, KeyEnd(i)) pass the causal mask for query i (Softmax's rule).
  int64_t KeyEnd(int64_t i) const {
    if (!causal) return Tk;
    return std::clamp<int64_t>(i + (Tk - Tq) + 1, 0, Tk);
  }
  // Query heads per key/value group.
  int64_t HeadsPerGroup() const { return NH / G; }
  // The (batch, key/value head) pair that the (batch, query head) pair bh reads.
  int64_t KvHead(int64_t bh) const { return (bh / NH) * G + (bh % NH) / HeadsPerGroup(); }
  // The padding mask's row for the (batch, head) pair bh, or null.
  const int32_t* MaskRow(int64_t bh) const {
    return mask == nullptr ? nullptr : mask + (bh / NH) * Tk;
  }
};

// out [B, NH, Tq, D] and lse [B, NH, Tq] (f32) from q [B, NH, Tq, D], k, v [B, G, Tk, D]: host
// views of one float dtype, contiguous, outputs not overlapping inputs. Threads over
// (b, h, query tile) on ctx.pool; bitwise independent of the thread count.
void FusedAttentionCpu(const ExecContext& ctx, const AttentionProblem& p, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse);

// dq, dk, dv (overwritten) from the forward's inputs, out, lse and dout, under the same
// preconditions. Two passes without atomics (dk and dv per key tile of a group, summed over the
// group's query heads in order, then dq per query tile); bitwise independent of the thread count.
void FusedAttentionBackwardCpu(const ExecContext& ctx, const AttentionProblem& p,
                               const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView& dout, const TensorView& lse,
                               const TensorView& dq, const TensorView& dk, const TensorView& dv);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ATTENTION_CPU_H_
