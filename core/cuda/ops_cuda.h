// CUDA implementations behind the op interface (core/ops). Called by the ops' device dispatch
// after argument checks; tensors are contiguous CUDA views. Only built when MT_WITH_CUDA is set.
#ifndef MT_CORE_CUDA_OPS_CUDA_H_
#define MT_CORE_CUDA_OPS_CUDA_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace cuda {

absl::Status BiasAdd(const ExecContext& ctx, const TensorView& x, const TensorView& bias,
                     const TensorView& y);

}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_OPS_CUDA_H_
