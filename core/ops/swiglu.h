// SwiGLU activation (Shazeer 2020), the gated MLP non-linearity of PaLM and LLaMA:
//   y = silu(gate) * up,  silu(g) = g * sigmoid(g) = g / (1 + exp(-g)),
// and its backward, with s = sigmoid(gate):
//   dgate = dy * up * s * (1 + gate * (1 - s)),  dup = dy * silu(gate).
//
// gate, up, y, dy, dgate, dup: one shape (e.g. [N, F], any rank) and one float dtype (f32, bf16,
// f16), contiguous, on one device (CPU or CUDA). Math in f32 from the widened inputs (exp in f32),
// then one rounding of each output to the dtype. y may alias gate or up; dgate and dup may alias
// any of gate, up and dy, but not each other. CPU results do not depend on the thread count.
// Errors: InvalidArgument for mismatched shapes/dtypes/devices, non-contiguous views, or dgate and
// dup being the same memory; Unimplemented for another dtype or device.
#ifndef MT_CORE_OPS_SWIGLU_H_
#define MT_CORE_OPS_SWIGLU_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

absl::Status SwiGlu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                    const TensorView& y);
absl::Status SwiGluBackward(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                            const TensorView& dy, const TensorView& dgate, const TensorView& dup);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_SWIGLU_H_
