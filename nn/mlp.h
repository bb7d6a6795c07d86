// ParallelMLP: y = RowParallel(GeLU(ColumnParallel(x))), hidden width ffn (4H by default) split
// across TP ranks. One all-reduce forward (g in the second projection) and one backward (f in the
// first). The first projection's bias and the GeLU run in its GEMM's fused epilogue
// (ColumnParallelLinear::ForwardGelu), which also writes the pre-activation GeluBackward needs.
// Activations in the store's compute dtype. Owns its saved activations; Release() frees them.
#ifndef MT_NN_MLP_H_
#define MT_NN_MLP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/linear.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

class ParallelMLP {
 public:
  ParallelMLP() = default;
  // InvalidArgument if ffn is not divisible by the TP size.
  static absl::StatusOr<ParallelMLP> Create(ParameterStore* store, const std::string& prefix,
                                            int64_t hidden, int64_t ffn, double init_std,
                                            double output_init_std);
  // x: [N, H] (kept by the caller until Backward); y: [N, H]. deferred_bias: as for
  // RowParallelLinear::Forward (fc2's bias).
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y,
                       const TensorView** deferred_bias = nullptr);
  // dy: [N, H]; dx: [N, H] (complete).
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx);
  void Release();
  int64_t ActivationBytes() const { return pre_.nbytes() + act_.nbytes(); }

 private:
  DType dtype_ = DType::kF32;  // The store's compute dtype.
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
  TensorView x_;
  Tensor pre_;  // [N, ffn / tp] before GeLU
  Tensor act_;  // [N, ffn / tp] after GeLU
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_MLP_H_
