// The CUDA launchers' form of a dropout (cuda::DropoutParams) from ops::DropoutArgs, for the ops
// whose CUDA path draws ops::Dropout's mask (Dropout, BiasDropoutAdd, FusedAttention). Internal to
// core/ops; a plain struct conversion (launchers.h holds no CUDA code), in every build.
#ifndef MT_CORE_OPS_DROPOUT_CUDA_H_
#define MT_CORE_OPS_DROPOUT_CUDA_H_

#include "core/cuda/launchers.h"
#include "core/ops/elementwise.h"

namespace mt {
namespace ops {
namespace internal {

// The keep scale is 1 / (1 - p) in f32, as the CPU kernels compute it.
inline cuda::DropoutParams CudaDropoutParams(const DropoutArgs& args) {
  cuda::DropoutParams params;
  params.p = args.p;
  params.scale = 1.0f / (1.0f - args.p);
  params.seed = args.seed;
  params.stream_id = args.stream;
  params.key_base = args.key_base;
  params.key_inner = args.key_inner;
  params.key_outer_stride = args.key_outer_stride;
  return params;
}

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_DROPOUT_CUDA_H_
