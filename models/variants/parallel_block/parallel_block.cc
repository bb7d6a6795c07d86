#include "models/variants/parallel_block/parallel_block.h"

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/status.h"
#include "nn/linear.h"

namespace mt {
namespace models {

namespace {
constexpr int kDropoutSite = 2;  // The sum of the branches (sites < 16 per layer).

absl::StatusOr<TensorView> As2D(const TensorView& t) {
  return t.Reshape({t.dim(0) * t.dim(1), t.dim(2)});
}
}  // namespace

absl::StatusOr<std::unique_ptr<ParallelBlock>> ParallelBlock::Create(
    nn::ParameterStore* store, const std::string& prefix, int layer_index,
    const nn::TransformerLayerConfig& config) {
  if (config.norm != nn::NormPosition::kPreNorm) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel block ", prefix, ": the block is pre-norm (norm must be pre)"));
  }
  std::unique_ptr<ParallelBlock> b(new ParallelBlock());
  b->config_ = config;
  if (b->config_.ffn == 0) b->config_.ffn = 4 * config.hidden;
  b->config_.tp_reduce = nn::TpReduce::kPartial;
  b->dtype_ = store->compute_dtype();
  b->layer_index_ = layer_index;
  ASSIGN_OR_RETURN(b->ln_, nn::LayerNormFactory()(store, prefix + ".ln", b->config_));
  ASSIGN_OR_RETURN(b->attention_, nn::ParallelSelfAttention::Create(
                                      store, prefix + ".attention",
                                      nn::AttentionConfigOf(b->config_, layer_index)));
  ASSIGN_OR_RETURN(b->mlp_, nn::GeluMlpFactory()(store, prefix + ".mlp", b->config_));
  return b;
}

nn::LayerFactory ParallelBlock::Factory(const nn::TransformerLayerConfig& config) {
  return [config](nn::ParameterStore* store, const std::string& prefix,
                  int layer_index) -> absl::StatusOr<std::unique_ptr<nn::Layer>> {
    ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> b, Create(store, prefix, layer_index, config));
    return std::unique_ptr<nn::Layer>(std::move(b));
  };
}

ops::DropoutArgs ParallelBlock::HiddenDropout(const nn::StepContext& sc) const {
  return sc.Dropout(config_.hidden_dropout, layer_index_, kDropoutSite, T_ * config_.hidden);
}

absl::Status ParallelBlock::Forward(const nn::StepContext& sc, const TensorView& x,
                                    const TensorView* padding_mask, const TensorView& y) {
  if (x.rank() != 3 || x.dim(2) != config_.hidden || x.dtype != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat("parallel block ", layer_index_, ": input ",
                                                   x.DebugString(), " must be ", DTypeName(dtype_),
                                                   "[B, T, ", config_.hidden, "]"));
  }
  input_.Save(x, padding_mask);
  RETURN_IF_ERROR(ForwardImpl(sc, y));
  if (config_.recompute == nn::Recompute::kYes) ReleaseAll();
  return absl::OkStatus();
}

absl::Status ParallelBlock::ForwardImpl(const nn::StepContext& sc, const TensorView& y) {
  B_ = input_.x().dim(0);
  T_ = input_.x().dim(1);
  const ExecContext& ec = *sc.exec;
  for (Tensor* t : {&ln_out_, &branch_, &mlp_out_}) {
    if (t->shape() == input_.x().shape && t->device() == ec.device) continue;
    ASSIGN_OR_RETURN(*t, Alloc(ec, input_.x().shape, dtype_));
  }
  ASSIGN_OR_RETURN(TensorView x2, As2D(input_.x()));
  ASSIGN_OR_RETURN(TensorView ln2, As2D(ln_out_.view()));
  ASSIGN_OR_RETURN(TensorView branch, As2D(branch_.view()));
  ASSIGN_OR_RETURN(TensorView mlp_out, As2D(mlp_out_.view()));
  ASSIGN_OR_RETURN(TensorView y2, As2D(y));
  RETURN_IF_ERROR(ln_->Forward(sc, x2, ln2));
  // Both branches' partial products (no all-reduce, biases left out), summed, reduced once.
  const TensorView *attention_bias = nullptr, *mlp_bias = nullptr;
  RETURN_IF_ERROR(attention_.Forward(sc, ln_out_.view(), input_.padding_mask(), branch_.view(),
                                     &attention_bias));
  RETURN_IF_ERROR(mlp_->Forward(sc, ln2, mlp_out, &mlp_bias));
  RETURN_IF_ERROR(ops::Add(ec, branch, mlp_out, branch));
  RETURN_IF_ERROR(nn::GForward(sc, branch));
  if (attention_bias != nullptr) RETURN_IF_ERROR(ops::BiasAdd(ec, branch, *attention_bias, branch));
  RETURN_IF_ERROR(ops::BiasDropoutAdd(ec, branch, mlp_bias, HiddenDropout(sc), x2, y2));
  saved_ = true;
  return absl::OkStatus();
}

void ParallelBlock::ReleaseAll() {
  attention_.Release();
  mlp_->Release();
  ln_->Release();
  for (Tensor* t : {&ln_out_, &branch_, &mlp_out_}) *t = Tensor();
  saved_ = false;
}

int64_t ParallelBlock::ActivationBytes() const {
  int64_t n = attention_.ActivationBytes() + mlp_->ActivationBytes() + ln_->ActivationBytes();
  for (const Tensor* t : {&ln_out_, &branch_, &mlp_out_}) n += t->nbytes();
  return n;
}

absl::Status ParallelBlock::Backward(const nn::StepContext& sc, const TensorView& dy,
                                     const TensorView& dx) {
  const ExecContext& ec = *sc.exec;
  const auto& shape = input_.x().shape;  // [B, T, H]
  if (!saved_) {
    // Activation checkpointing: recompute the forward (same masks) into scratch.
    ASSIGN_OR_RETURN(Tensor scratch, Alloc(ec, shape, dtype_));
    RETURN_IF_ERROR(ForwardImpl(sc, scratch.view()));
  }
  backward_peak_bytes_ = ActivationBytes();
  ASSIGN_OR_RETURN(Tensor d_sum, Alloc(ec, shape, dtype_));   // Of the branches' sum.
  ASSIGN_OR_RETURN(Tensor d_attn, Alloc(ec, shape, dtype_));  // Partial input gradients.
  ASSIGN_OR_RETURN(Tensor d_mlp, Alloc(ec, shape, dtype_));
  ASSIGN_OR_RETURN(TensorView dy2, As2D(dy));
  ASSIGN_OR_RETURN(TensorView dx2, As2D(dx));
  ASSIGN_OR_RETURN(TensorView dsum, As2D(d_sum.view()));
  ASSIGN_OR_RETURN(TensorView dattn, As2D(d_attn.view()));
  ASSIGN_OR_RETURN(TensorView dmlp, As2D(d_mlp.view()));
  // y = x + drop(s): ds = drop'(dy) (the gradient of each branch's output and of both biases).
  RETURN_IF_ERROR(ops::DropoutBackward(ec, dy2, HiddenDropout(sc), dsum));
  RETURN_IF_ERROR(attention_.Backward(sc, d_sum.view(), d_attn.view()));
  RETURN_IF_ERROR(mlp_->Backward(sc, dsum, dmlp));
  // dLN = the two branches' partial input gradients, summed and reduced once (f backward).
  RETURN_IF_ERROR(ops::Add(ec, dattn, dmlp, dattn));
  RETURN_IF_ERROR(nn::FBackward(sc, dattn));
  RETURN_IF_ERROR(ln_->Backward(sc, dattn, dx2));
  RETURN_IF_ERROR(ops::Add(ec, dx2, dy2, dx2));  // The residual.
  if (config_.recompute == nn::Recompute::kYes) ReleaseAll();
  return absl::OkStatus();
}

}  // namespace models
}  // namespace mt
