#include "nn/norm.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/ops/layernorm.h"
#include "core/ops/rmsnorm.h"
#include "core/status.h"

namespace mt {
namespace nn {
namespace {

// (Re)allocates `t` as f32 [n] on the context's device unless it already is.
absl::Status EnsureF32(const StepContext& sc, int64_t n, Tensor* t) {
  if (t->numel() == n && t->device() == sc.exec->device) return absl::OkStatus();
  ASSIGN_OR_RETURN(*t, Alloc(*sc.exec, {n}, DType::kF32));
  return absl::OkStatus();
}

// A gain: "<prefix>.weight" [hidden], ones, replicated, no weight decay.
absl::StatusOr<int> AddGain(ParameterStore* store, const std::string& prefix, int64_t hidden) {
  return store->Add({prefix + ".weight",
                     {hidden},
                     /*split_dim=*/-1,
                     Init::kOnes,
                     0.0,
                     /*weight_decay=*/false,
                     /*vocab_padded=*/false,
                     /*f32_compute=*/true});
}

}  // namespace

// ---------------------------------------------------------------- LayerNormModule

absl::StatusOr<LayerNormModule> LayerNormModule::Create(ParameterStore* store,
                                                        const std::string& prefix, int64_t hidden,
                                                        float eps) {
  LayerNormModule m;
  m.store_ = store;
  m.eps_ = eps;
  ASSIGN_OR_RETURN(m.gamma_, AddGain(store, prefix, hidden));
  ASSIGN_OR_RETURN(m.beta_, store->Add({prefix + ".bias",
                                        {hidden},
                                        -1,
                                        Init::kZeros,
                                        0.0,
                                        /*weight_decay=*/false,
                                        /*vocab_padded=*/false,
                                        /*f32_compute=*/true}));
  return m;
}

absl::Status LayerNormModule::Forward(const StepContext& sc, const TensorView& x,
                                      const TensorView& y) {
  const int64_t rows = x.numel() / x.dim(-1);
  RETURN_IF_ERROR(EnsureF32(sc, rows, &mean_));
  RETURN_IF_ERROR(EnsureF32(sc, rows, &rstd_));
  x_ = x;
  return ops::LayerNorm(*sc.exec, x, store_->value(gamma_), store_->value(beta_), eps_, y,
                        mean_.view(), rstd_.view());
}

absl::Status LayerNormModule::Backward(const StepContext& sc, const TensorView& dy,
                                       const TensorView& dx) {
  if (rstd_.numel() == 0) {
    return absl::FailedPreconditionError("layernorm: Backward without a saved Forward");
  }
  const int64_t H = x_.dim(-1);
  RETURN_IF_ERROR(EnsureF32(sc, H, &dgamma_));
  RETURN_IF_ERROR(EnsureF32(sc, H, &dbeta_));
  RETURN_IF_ERROR(ops::LayerNormBackward(*sc.exec, x_, store_->value(gamma_), mean_.view(),
                                         rstd_.view(), dy, dx, dgamma_.view(), dbeta_.view()));
  RETURN_IF_ERROR(ops::Add(*sc.exec, store_->grad(gamma_), dgamma_.view(), store_->grad(gamma_)));
  return ops::Add(*sc.exec, store_->grad(beta_), dbeta_.view(), store_->grad(beta_));
}

void LayerNormModule::Release() {
  mean_ = Tensor();
  rstd_ = Tensor();
}

// ---------------------------------------------------------------- RmsNormModule

absl::StatusOr<RmsNormModule> RmsNormModule::Create(ParameterStore* store,
                                                    const std::string& prefix, int64_t hidden,
                                                    float eps) {
  if (hidden < 1 || !(std::isfinite(eps) && eps >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("rmsnorm ", prefix, ": hidden size ", hidden,
                                                   " must be >= 1 and eps ", eps,
                                                   " finite and >= 0"));
  }
  RmsNormModule m;
  m.store_ = store;
  m.eps_ = eps;
  ASSIGN_OR_RETURN(m.gamma_, AddGain(store, prefix, hidden));
  return m;
}

absl::Status RmsNormModule::Forward(const StepContext& sc, const TensorView& x,
                                    const TensorView& y) {
  RETURN_IF_ERROR(EnsureF32(sc, x.numel() / x.dim(-1), &rstd_));
  x_ = x;
  return ops::RmsNorm(*sc.exec, x, store_->value(gamma_), eps_, y, rstd_.view());
}

absl::Status RmsNormModule::Backward(const StepContext& sc, const TensorView& dy,
                                     const TensorView& dx) {
  if (rstd_.numel() == 0) {
    return absl::FailedPreconditionError("rmsnorm: Backward without a saved Forward");
  }
  RETURN_IF_ERROR(EnsureF32(sc, x_.dim(-1), &dgamma_));
  RETURN_IF_ERROR(ops::RmsNormBackward(*sc.exec, x_, store_->value(gamma_), rstd_.view(), dy, dx,
                                       dgamma_.view()));
  return ops::Add(*sc.exec, store_->grad(gamma_), dgamma_.view(), store_->grad(gamma_));
}

void RmsNormModule::Release() { rstd_ = Tensor(); }

}  // namespace nn
}  // namespace mt
