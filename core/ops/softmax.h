// Softmax over the last dimension with an input scale and optional masks, as attention uses it:
//   y[..., i, j] = softmax_j(scale * x[..., i, j]) over the unmasked j; masked entries get y = 0.
//
// x, y, dy, dx: [..., Tq, Tk] (rank >= 2), f32/bf16/f16, math in f32.
// Causal mask: query i (of Tq) may see key j iff j <= i + (Tk - Tq) (queries are the LAST Tq
// positions of the keys). Padding mask: an i32 tensor [B, Tk] where B is the leading dimension of
// x (x is [B, ..., Tq, Tk]); 0 marks a padded key (never attended), nonzero a real one. A row with
// every key masked yields all zeros (and zero gradient), as does a row whose unmasked scores are
// all -inf. The row max is subtracted before exp (no overflow for any finite input).
// All tensors contiguous and on one device (CPU or CUDA); y may alias x and dx may
// alias dy or y. A padding mask needs rank(x) >= 3.
// Errors: InvalidArgument for mismatched shapes/dtypes/devices, non-contiguous views, rank < 2, a
// non-finite scale or a bad padding mask shape; Unimplemented for other dtypes (the mask: not
// i32) or devices. Results do not depend on the thread count.
#ifndef MT_CORE_OPS_SOFTMAX_H_
#define MT_CORE_OPS_SOFTMAX_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

enum class CausalMask { kNo, kYes };

struct SoftmaxOptions {
  float scale = 1.0f;
  CausalMask causal = CausalMask::kNo;
  const TensorView* padding_mask = nullptr;  // Optional i32 [B, Tk].
};

absl::Status Softmax(const ExecContext& ctx, const TensorView& x, const TensorView& y,
                     const SoftmaxOptions& options = {});

// dx = scale * y * (dy - sum_j(dy * y)), from the forward's output y. Masked entries get 0.
absl::Status SoftmaxBackward(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                             const TensorView& dx, float scale = 1.0f);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_SOFTMAX_H_
