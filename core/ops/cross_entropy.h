// Softmax cross-entropy over logits (the serial version; the vocab-parallel one lives in nn/).
//
// logits, dlogits: [N, V] f32/bf16/f16, one dtype; targets: [N] i32/i64; losses: [N] f32;
// dlosses: [N] f32 (the upstream gradient of each loss, e.g. 1/N for a mean). All contiguous, on
// one device. Math in f32 except the sum of exponentials, which accumulates in f64; the row
// maximum is subtracted first, so large logits neither overflow nor lose the loss.
// A target equal to kIgnoreIndex contributes loss 0 and gradient 0 (a zero row of dlogits); any
// other target outside [0, V) is an error (OutOfRange naming the row and the value), found before
// anything is written. Other errors: InvalidArgument (shapes, contiguity, mixed devices, dlogits'
// dtype differing from logits'), Unimplemented (other dtypes; CUDA tensors in CPU-only builds or
// without a device). CUDA tensors need ctx.cuda: their targets are checked on the device, which
// synchronizes the stream.
#ifndef MT_CORE_OPS_CROSS_ENTROPY_H_
#define MT_CORE_OPS_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

inline constexpr int64_t kIgnoreIndex = -100;

// losses[n] = logsumexp(logits[n]) - logits[n, targets[n]].
absl::Status CrossEntropy(const ExecContext& ctx, const TensorView& logits,
                          const TensorView& targets, const TensorView& losses);

// dlogits[n] = (softmax(logits[n]) - onehot(targets[n])) * dlosses[n]; overwrites dlogits (which
// may alias logits).
absl::Status CrossEntropyBackward(const ExecContext& ctx, const TensorView& logits,
                                  const TensorView& targets, const TensorView& dlosses,
                                  const TensorView& dlogits);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_CROSS_ENTROPY_H_
