// Element-wise ops: bias add, GeLU, residual add, scaling, dtype conversion, fill, dropout, and
// the fused bias-dropout-add.
//
// Unless stated otherwise: float tensors (f32, bf16, f16) with math in f32; inputs and outputs
// contiguous, same device, same dtype and same shape; an output may alias an input of the same
// shape (in-place). Errors: InvalidArgument for shape/contiguity/device/dtype mismatches between
// the operands, Unimplemented for dtypes or devices without a kernel. CPU kernels split the work
// over ctx.pool; results do not depend on the number of threads (bitwise).
// Devices: CPU, and CUDA in CUDA builds (core/cuda); BiasGrad on CUDA needs ctx.cuda.
#ifndef MT_CORE_OPS_ELEMENTWISE_H_
#define MT_CORE_OPS_ELEMENTWISE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

// y[..., n] = x[..., n] + bias[n].  x, y: [..., N] (rank >= 1); bias: [N], x's dtype.
absl::Status BiasAdd(const ExecContext& ctx, const TensorView& x, const TensorView& bias,
                     const TensorView& y);
// dbias[n] = sum over all leading indices of dy[..., n]; overwrites dbias (dy's dtype, or f32 for a
// bf16/f16 dy: mixed-precision bias gradients keep the f32 sum without rounding it to 16 bits).
// Sums in f32 over fixed row blocks, then over the blocks in order (deterministic for any pool).
absl::Status BiasGrad(const ExecContext& ctx, const TensorView& dy, const TensorView& dbias);

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the GPT-2 / Megatron approximation.
absl::Status Gelu(const ExecContext& ctx, const TensorView& x, const TensorView& y);
// dx = dy * GeLU'(x); overwrites dx (may alias dy).
absl::Status GeluBackward(const ExecContext& ctx, const TensorView& x, const TensorView& dy,
                          const TensorView& dx);
// The GeLU forms: kTanh, the approximation above (GPT-2, Megatron); kErf, the exact
// x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))) of the published BERT (Hugging Face's "gelu").
enum class GeluForm { kTanh, kErf };
// Gelu / GeluBackward in `form` (kTanh: the functions above).
absl::Status Gelu(const ExecContext& ctx, const TensorView& x, const TensorView& y, GeluForm form);
absl::Status GeluBackward(const ExecContext& ctx, const TensorView& x, const TensorView& dy,
                          const TensorView& dx, GeluForm form);

// out = a + b (residual connections).
absl::Status Add(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out);
// y = alpha * x.
absl::Status Scale(const ExecContext& ctx, const TensorView& x, float alpha, const TensorView& y);
// y = x converted to y's dtype (any float dtype to any float dtype; round to nearest even).
// Shapes must match; dtypes may differ. y may alias x only when the dtypes are equal (then it is a
// no-op); overlapping x and y of different dtypes are InvalidArgument.
absl::Status Convert(const ExecContext& ctx, const TensorView& x, const TensorView& y);
// Every element of x set to `value` rounded once to x's float dtype (nearest even), or, for
// integer dtypes (i32, i64, u16), to value truncated toward zero; InvalidArgument if that integer
// (or NaN/inf) is not representable in x's dtype.
absl::Status Fill(const ExecContext& ctx, const TensorView& x, double value);

// Dropout with a counter-based mask (core/philox.h): element i is kept iff
// PhiloxUniform(seed, stream, key(i)) >= p, and kept elements are scaled by 1 / (1 - p).
// key(i) = key_base + (i / key_inner) * key_outer_stride + (i % key_inner), which lets a tensor-
// parallel rank holding a slice of a larger logical tensor use the slice's GLOBAL indices, so that
// the mask does not depend on the TP degree. The defaults give key(i) = i. Requires key_base >= 0,
// key_inner >= 0 and, when key_inner > 0, key_outer_stride >= key_inner (distinct elements get
// distinct keys); InvalidArgument otherwise.
struct DropoutArgs {
  float p = 0.0f;  // Drop probability in [0, 1).
  uint64_t seed = 0;
  uint64_t stream = 0;  // Distinguishes the call sites of one step (layer, position in layer).
  int64_t key_base = 0;
  int64_t key_inner = 0;  // 0 means "the whole tensor" (no wrap).
  int64_t key_outer_stride = 0;
};
// The element key for index i (exposed so that tests and CUDA kernels use the same definition).
inline int64_t DropoutKey(const DropoutArgs& args, int64_t i) {
  if (args.key_inner <= 0) return args.key_base + i;
  return args.key_base + (i / args.key_inner) * args.key_outer_stride + (i % args.key_inner);
}
// OK iff args meet the requirements above and p is in [0, 1); else InvalidArgument
// "<op>: dropout probability p = ..." or "<op>: bad dropout key mapping (...)". For the ops that
// take DropoutArgs (here and core/ops/attention.h).
absl::Status CheckDropoutArgs(absl::string_view op, const DropoutArgs& args);
// y = mask(x) * x / (1 - p) (dropped elements are exactly 0, even where x is inf or NaN). p = 0
// copies. InvalidArgument if p is outside [0, 1) or NaN.
absl::Status Dropout(const ExecContext& ctx, const TensorView& x, const DropoutArgs& args,
                     const TensorView& y);
// dx = mask * dy / (1 - p), regenerating the same mask from args (nothing is stored).
absl::Status DropoutBackward(const ExecContext& ctx, const TensorView& dy, const DropoutArgs& args,
                             const TensorView& dx);

// Fused bias-dropout-add (the residual branch of a transformer layer):
//   out[..., n] = residual[..., n] + Dropout(x[..., n] + bias[n])
// with exactly the mask Dropout(x + bias, dropout) draws (element i kept iff
// PhiloxUniform(seed, stream, DropoutKey(dropout, i)) >= p; dropped elements contribute exactly
// 0, even where x + bias is inf or NaN; p = 0 keeps everything). x, residual, out: [..., N]
// (rank >= 1), same dtype; bias: [N] of x's dtype, or null for no bias. Math in f32 as separate
// roundings of (x + bias), (x + bias) * (1 / (1 - p)) and the sum (never fused into an FMA), then
// one rounding to out's dtype: at f32 the result is bitwise that of BiasAdd -> Dropout -> Add. out
// may alias x or residual. Its backward needs no fused op: dresidual = dout, dx =
// DropoutBackward(dout), dbias = BiasGrad(dx). InvalidArgument as for BiasAdd and Dropout (shapes,
// dtypes, contiguity, devices, p outside [0, 1), a bad key mapping).
absl::Status BiasDropoutAdd(const ExecContext& ctx, const TensorView& x, const TensorView* bias,
                            const DropoutArgs& dropout, const TensorView& residual,
                            const TensorView& out);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ELEMENTWISE_H_
