#include "nn/mlp.h"

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/status.h"

namespace mt {
namespace nn {

absl::StatusOr<ParallelMLP> ParallelMLP::Create(ParameterStore* store, const std::string& prefix,
                                                int64_t hidden, int64_t ffn, double init_std,
                                                double output_init_std) {
  if (ffn % store->tp_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("mlp: ffn hidden size ", ffn,
                                                   " is not divisible by the tensor-parallel size ",
                                                   store->tp_size()));
  }
  ParallelMLP m;
  m.dtype_ = store->compute_dtype();
  ASSIGN_OR_RETURN(m.fc1_, ColumnParallelLinear::Create(store, prefix + ".fc1", hidden, ffn,
                                                        Bias::kYes, init_std));
  ASSIGN_OR_RETURN(m.fc2_, RowParallelLinear::Create(store, prefix + ".fc2", ffn, hidden,
                                                     Bias::kYes, output_init_std));
  return m;
}

absl::Status ParallelMLP::Forward(const StepContext& sc, const TensorView& x,
                                  const TensorView& y, const TensorView** deferred_bias) {
  const int64_t N = x.dim(0), F = fc1_.local_out();
  if (pre_.numel() != N * F || pre_.device() != sc.exec->device) {
    ASSIGN_OR_RETURN(pre_, Alloc(*sc.exec, {N, F}, dtype_));
    ASSIGN_OR_RETURN(act_, Alloc(*sc.exec, {N, F}, dtype_));
  }
  x_ = x;
  RETURN_IF_ERROR(fc1_.ForwardGelu(sc, x, pre_.view(), act_.view()));
  return fc2_.Forward(sc, act_.view(), y, deferred_bias);
}

absl::Status ParallelMLP::Backward(const StepContext& sc, const TensorView& dy,
                                   const TensorView& dx) {
  if (pre_.numel() == 0) return absl::FailedPreconditionError("mlp: Backward without Forward");
  ASSIGN_OR_RETURN(Tensor dact, Alloc(*sc.exec, pre_.shape(), dtype_));
  RETURN_IF_ERROR(fc2_.Backward(sc, act_.view(), dy, dact.view()));
  RETURN_IF_ERROR(ops::GeluBackward(*sc.exec, pre_.view(), dact.view(), dact.view()));
  return fc1_.Backward(sc, x_, dact.view(), dx);
}

void ParallelMLP::Release() {
  pre_ = Tensor();
  act_ = Tensor();
}

}  // namespace nn
}  // namespace mt
