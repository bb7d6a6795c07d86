#include "nn/linear.h"

#include "absl/strings/str_cat.h"
#include "comm/mappings.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/status.h"

namespace mt {
namespace nn {

absl::Status FBackward(const StepContext& sc, const TensorView& dx) {
  if (sc.tp == nullptr) return absl::OkStatus();
  return comm::CopyToTensorParallelRegionBackward(*sc.tp, dx);
}

absl::Status GForward(const StepContext& sc, const TensorView& y) {
  if (sc.tp == nullptr) return absl::OkStatus();
  return comm::ReduceFromTensorParallelRegionForward(*sc.tp, y);
}

absl::Status AccumulateBiasGrad(const StepContext& sc, const TensorView& dy, const TensorView& grad,
                                Tensor* scratch) {
  if (scratch->numel() != grad.numel() || scratch->dtype() != grad.dtype ||
      scratch->device() != grad.device) {
    ASSIGN_OR_RETURN(*scratch, AllocZeros(*sc.exec, grad.shape, grad.dtype));
  }
  RETURN_IF_ERROR(ops::BiasGrad(*sc.exec, dy, scratch->view()));
  return ops::Add(*sc.exec, grad, scratch->view(), grad);
}

absl::Status LinearBackwardLocal(const StepContext& sc, ParameterStore& store, int weight, int bias,
                                 const TensorView& x, const TensorView& dy, const TensorView& dx,
                                 bool accumulate_dx, Tensor* bias_scratch) {
  ops::GemmOptions accumulate;
  accumulate.transpose_a = ops::Transpose::kYes;
  accumulate.beta = 1.0f;
  RETURN_IF_ERROR(ops::Gemm(*sc.exec, x, dy, store.grad(weight), accumulate));
  if (bias >= 0) RETURN_IF_ERROR(AccumulateBiasGrad(sc, dy, store.grad(bias), bias_scratch));
  ops::GemmOptions nt;
  nt.transpose_b = ops::Transpose::kYes;
  if (accumulate_dx) nt.beta = 1.0f;
  return ops::Gemm(*sc.exec, dy, store.compute_value(weight), dx, nt);
}

absl::Status DeclareLinear(ParameterStore* store, const std::string& prefix, int64_t in,
                           int64_t out, Bias bias, double init_std, int weight_split_dim,
                           int bias_split_dim, int* weight, int* bias_index) {
  ASSIGN_OR_RETURN(*weight, store->Add({prefix + ".weight",
                                        {in, out},
                                        weight_split_dim,
                                        Init::kNormal,
                                        init_std,
                                        /*weight_decay=*/true}));
  *bias_index = -1;
  if (bias == Bias::kYes) {
    ASSIGN_OR_RETURN(
        *bias_index,
        store->Add(
            {prefix + ".bias", {out}, bias_split_dim, Init::kZeros, 0.0, /*weight_decay=*/false}));
  }
  return absl::OkStatus();
}

absl::StatusOr<ColumnParallelLinear> ColumnParallelLinear::Create(ParameterStore* store,
                                                                  const std::string& prefix,
                                                                  int64_t in, int64_t out,
                                                                  Bias bias, double init_std) {
  ColumnParallelLinear l;
  l.store_ = store;
  RETURN_IF_ERROR(DeclareLinear(store, prefix, in, out, bias, init_std, /*weight_split_dim=*/1,
                                /*bias_split_dim=*/0, &l.weight_, &l.bias_));
  l.in_ = in;
  l.local_out_ = out / store->tp_size();
  return l;
}

absl::Status ColumnParallelLinear::Forward(const StepContext& sc, const TensorView& x,
                                           const TensorView& y) const {
  // f forward is the identity: x is already complete on every TP rank.
  ops::GemmOptions options;
  if (bias_ >= 0) options.bias = &store_->compute_value(bias_);
  return ops::Gemm(*sc.exec, x, store_->compute_value(weight_), y, options);
}

absl::Status ColumnParallelLinear::ForwardGelu(const StepContext& sc, const TensorView& x,
                                               const TensorView& pre, const TensorView& y) const {
  ops::GemmOptions options;
  if (bias_ >= 0) options.bias = &store_->compute_value(bias_);
  options.epilogue = ops::Epilogue::kGelu;
  options.pre_activation = &pre;
  return ops::Gemm(*sc.exec, x, store_->compute_value(weight_), y, options);
}

absl::Status ColumnParallelLinear::Backward(const StepContext& sc, const TensorView& x,
                                            const TensorView& dy, const TensorView& dx) {
  RETURN_IF_ERROR(BackwardLocal(sc, x, dy, dx, InputGrad::kOverwrite));
  // f backward: each rank holds the contribution of its output columns; sum them.
  return FBackward(sc, dx);
}

absl::Status ColumnParallelLinear::BackwardLocal(const StepContext& sc, const TensorView& x,
                                                 const TensorView& dy, const TensorView& dx,
                                                 InputGrad mode) {
  return LinearBackwardLocal(sc, *store_, weight_, bias_, x, dy, dx, mode == InputGrad::kAccumulate,
                             &bias_scratch_);
}

absl::StatusOr<RowParallelLinear> RowParallelLinear::Create(ParameterStore* store,
                                                            const std::string& prefix, int64_t in,
                                                            int64_t out, Bias bias,
                                                            double init_std) {
  RowParallelLinear l;
  l.store_ = store;
  RETURN_IF_ERROR(DeclareLinear(store, prefix, in, out, bias, init_std, /*weight_split_dim=*/0,
                                /*bias_split_dim=*/-1, &l.weight_, &l.bias_));
  l.local_in_ = in / store->tp_size();
  l.out_ = out;
  return l;
}

absl::Status RowParallelLinear::Forward(const StepContext& sc, const TensorView& x,
                                        const TensorView& y, const TensorView** deferred_bias,
                                        TpReduce reduce) const {
  if (deferred_bias != nullptr) *deferred_bias = nullptr;
  if (reduce == TpReduce::kPartial) {
    if (bias_ >= 0) {
      if (deferred_bias == nullptr) {
        return absl::InvalidArgumentError(
            "row-parallel linear: a partial (TpReduce::kPartial) Forward needs deferred_bias");
      }
      *deferred_bias = &store_->compute_value(bias_);
    }
    return ops::Gemm(*sc.exec, x, store_->compute_value(weight_), y);
  }
  if (sc.tp == nullptr) {
    // No all-reduce: the bias can join the GEMM's epilogue.
    ops::GemmOptions options;
    if (bias_ >= 0) options.bias = &store_->compute_value(bias_);
    return ops::Gemm(*sc.exec, x, store_->compute_value(weight_), y, options);
  }
  RETURN_IF_ERROR(ops::Gemm(*sc.exec, x, store_->compute_value(weight_), y));
  // g forward: sum the partial products of the TP ranks, then add the bias once.
  RETURN_IF_ERROR(GForward(sc, y));
  if (bias_ < 0) return absl::OkStatus();
  if (deferred_bias != nullptr) {
    *deferred_bias = &store_->compute_value(bias_);
    return absl::OkStatus();
  }
  return ops::BiasAdd(*sc.exec, y, store_->compute_value(bias_), y);
}

absl::Status RowParallelLinear::Backward(const StepContext& sc, const TensorView& x,
                                         const TensorView& dy, const TensorView& dx) {
  // g backward is the identity: dy is complete and identical on every TP rank.
  return LinearBackwardLocal(sc, *store_, weight_, bias_, x, dy, dx, /*accumulate_dx=*/false,
                             &bias_scratch_);
}

}  // namespace nn
}  // namespace mt
