// Rotary position embedding (RoPE; Su et al. 2021) on queries or keys in attention's head-major
// layout, with the "rotate-half" pairing of GPT-NeoX and LLaMA:
//
//   x, y: [..., T, D], e.g. [B, NH, T, D]; row (..., t) holds the token at position p = offset + t.
//   For i < D/2, element i pairs with element i + D/2 and the pair is rotated by the angle
//     a(p, i) = p * theta_i,  theta_i = base^(-2i / D):
//       y[i]       = x[i] cos a - x[i + D/2] sin a
//       y[i + D/2] = x[i + D/2] cos a + x[i] sin a
//   RopeBackward is the transpose, the rotation by -a: dx[i] = dy[i] cos a + dy[i + D/2] sin a,
//   dx[i + D/2] = dy[i + D/2] cos a - dy[i] sin a.
//
// Precision: cos a and sin a are computed in double (theta_i = pow(base, -2i / D), a = p * theta_i,
// then cos and sin) and rounded once to f32, on the CPU (a table per call) and on CUDA (per block,
// in the kernel) alike, so the tables agree to f32 rounding even for positions in the tens of
// thousands; the rotation itself is f32 math with one rounding to the dtype.
// Dtypes: f32, bf16, f16 (x and y alike). Devices: CPU and CUDA. y may alias x (in place); dx may
// alias dy. Contiguous views only.
// Errors: InvalidArgument for mismatched shapes/dtypes/devices, non-contiguous views, a rank below
// 2, an odd or zero D, a base that is not finite and > 0, or a negative position_offset;
// Unimplemented for another dtype or device.
#ifndef MT_CORE_OPS_ROPE_H_
#define MT_CORE_OPS_ROPE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

struct RopeArgs {
  double base = 10000.0;        // theta_i = base^(-2i / D)
  int64_t position_offset = 0;  // Position of row t = 0 (incremental decoding: the cache length).
};

absl::Status Rope(const ExecContext& ctx, const TensorView& x, const RopeArgs& args,
                  const TensorView& y);
absl::Status RopeBackward(const ExecContext& ctx, const TensorView& dy, const RopeArgs& args,
                          const TensorView& dx);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ROPE_H_
