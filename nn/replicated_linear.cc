#include "nn/replicated_linear.h"

#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/status.h"

namespace mt {
namespace nn {

absl::StatusOr<ReplicatedLinear> ReplicatedLinear::Create(ParameterStore* store,
                                                          const std::string& prefix, int64_t in,
                                                          int64_t out, Bias bias, double init_std) {
  if (in < 1 || out < 1) {
    return absl::InvalidArgumentError(absl::StrCat("replicated linear ", prefix, ": sizes [", in,
                                                   ", ", out, "] must be positive"));
  }
  ReplicatedLinear l;
  l.store_ = store;
  RETURN_IF_ERROR(DeclareLinear(store, prefix, in, out, bias, init_std, /*weight_split_dim=*/-1,
                                /*bias_split_dim=*/-1, &l.weight_, &l.bias_));
  l.in_ = in;
  l.out_ = out;
  return l;
}

absl::Status ReplicatedLinear::Forward(const StepContext& sc, const TensorView& x,
                                       const TensorView& y) const {
  RETURN_IF_ERROR(ops::Gemm(*sc.exec, x, store_->compute_value(weight_), y));
  if (bias_ >= 0) RETURN_IF_ERROR(ops::BiasAdd(*sc.exec, y, store_->compute_value(bias_), y));
  return absl::OkStatus();
}

absl::Status ReplicatedLinear::Backward(const StepContext& sc, const TensorView& x,
                                        const TensorView& dy, const TensorView& dx) {
  return LinearBackwardLocal(sc, *store_, weight_, bias_, x, dy, dx, /*accumulate_dx=*/false,
                             &bias_scratch_);
}

}  // namespace nn
}  // namespace mt
