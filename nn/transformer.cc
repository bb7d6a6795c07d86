#include "nn/transformer.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/sequence_parallel.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/status.h"
#include "nn/context_parallel.h"

namespace mt {
namespace nn {

namespace {
constexpr int kAttentionOutputDropoutSite = 2;
constexpr int kMlpOutputDropoutSite = 3;

absl::StatusOr<TensorView> As2D(const TensorView& t) {
  if (t.rank() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("expected [B, T, H], got ", t.DebugString()));
  }
  return t.Reshape({t.dim(0) * t.dim(1), t.dim(2)});
}
}  // namespace

// ---------------------------------------------------------------- factories

namespace {
// A factory of a concrete module type M from M::Create's StatusOr<M>.
template <typename Base, typename M>
absl::StatusOr<std::unique_ptr<Base>> Own(absl::StatusOr<M> m) {
  if (!m.ok()) return m.status();
  return std::unique_ptr<Base>(std::make_unique<M>(*std::move(m)));
}
}  // namespace

NormFactory LayerNormFactory() {
  return [](ParameterStore* store, const std::string& prefix, const TransformerLayerConfig& c) {
    return Own<Norm>(LayerNormModule::Create(store, prefix, c.hidden, c.layernorm_eps));
  };
}

NormFactory RmsNormFactory() {
  return [](ParameterStore* store, const std::string& prefix, const TransformerLayerConfig& c) {
    return Own<Norm>(RmsNormModule::Create(store, prefix, c.hidden, c.layernorm_eps));
  };
}

MlpFactory GeluMlpFactory() {
  return [](ParameterStore* store, const std::string& prefix, const TransformerLayerConfig& c) {
    return Own<Mlp>(ParallelMLP::Create(store, prefix, c.hidden, c.ffn, c.init_std,
                                        c.output_init_std, c.tp_reduce, c.gelu));
  };
}

MlpFactory SwiGluMlpFactory() {
  return [](ParameterStore* store, const std::string& prefix, const TransformerLayerConfig& c) {
    return Own<Mlp>(SwiGluMLP::Create(store, prefix, c.hidden, c.ffn, c.init_std, c.output_init_std,
                                      c.tp_reduce));
  };
}

// ---------------------------------------------------------------- TransformerLayer

AttentionConfig AttentionConfigOf(const TransformerLayerConfig& config, int layer_index) {
  AttentionConfig ac;
  ac.hidden = config.hidden;
  ac.heads = config.heads;
  ac.num_query_groups = config.num_query_groups;
  ac.causal = config.causal;
  ac.dropout = config.attention_dropout;
  ac.init_std = config.init_std;
  ac.output_init_std = config.output_init_std;
  ac.layer_index = layer_index;
  ac.rotary_base = config.rotary_base;
  ac.bias = config.attention_bias;
  // With sequence parallelism the layer reduce-scatters the attention's partial output itself.
  ac.tp_reduce = config.sequence_parallel ? TpReduce::kPartial : config.tp_reduce;
  ac.recompute_core = config.recompute == Recompute::kSelective;
  return ac;
}

absl::StatusOr<std::unique_ptr<TransformerLayer>> TransformerLayer::Create(
    ParameterStore* store, const std::string& prefix, int layer_index,
    const TransformerLayerConfig& config) {
  return Create(store, prefix, layer_index, LayerSpec{config});
}

absl::StatusOr<std::unique_ptr<TransformerLayer>> TransformerLayer::Create(
    ParameterStore* store, const std::string& prefix, int layer_index, const LayerSpec& spec) {
  if (!spec.norm || !spec.mlp) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer layer ", prefix, ": the LayerSpec has no norm or MLP factory"));
  }
  std::unique_ptr<TransformerLayer> l(new TransformerLayer());
  l->config_ = spec.config;
  TransformerLayerConfig& config = l->config_;
  if (config.ffn == 0) config.ffn = 4 * config.hidden;
  l->store_ = store;
  l->dtype_ = store->compute_dtype();
  l->layer_index_ = layer_index;
  if (config.tp_reduce != TpReduce::kYes) {
    return absl::InvalidArgumentError(
        "transformer layer: reduces its attention and MLP itself (tp_reduce must be kYes)");
  }
  if (config.sequence_parallel && store->tp_size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transformer layer ", prefix, ": sequence parallelism needs tensor parallelism (TP > 1)"));
  }
  int first = store->size();
  ASSIGN_OR_RETURN(l->ln1_, spec.norm(store, prefix + ".ln1", config));
  if (config.sequence_parallel) l->norm_grads_.Add(first, store->size());
  const AttentionConfig ac = AttentionConfigOf(config, layer_index);
  ASSIGN_OR_RETURN(l->attention_, ParallelSelfAttention::Create(store, prefix + ".attention", ac));
  first = store->size();
  ASSIGN_OR_RETURN(l->ln2_, spec.norm(store, prefix + ".ln2", config));
  if (config.sequence_parallel) l->norm_grads_.Add(first, store->size());
  TransformerLayerConfig mlp_config = config;
  if (config.sequence_parallel) mlp_config.tp_reduce = TpReduce::kPartial;
  ASSIGN_OR_RETURN(l->mlp_, spec.mlp(store, prefix + ".mlp", mlp_config));
  if (config.sequence_parallel) l->gather_ = std::make_shared<GatherBuffers>();
  if (l->ln1_ == nullptr || l->ln2_ == nullptr || l->mlp_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transformer layer ", prefix, ": a LayerSpec factory returned no module without an error"));
  }
  return l;
}

ops::DropoutArgs TransformerLayer::HiddenDropout(const StepContext& sc, int site, int half) const {
  // Keyed by the element's index in the whole [B, T, H] (sequence parallel: of this rank's slice;
  // context parallel: of half `half`, one of this rank's chunks of the whole sequence).
  const int64_t H = config_.hidden;
  if (sc.cp_size() > 1) {
    const ops::DropoutArgs whole =
        sc.Dropout(config_.hidden_dropout, layer_index_, site, 2 * sc.cp_size() * seq_ * H);
    return CpChunkDropout(sc, whole, seq_, H, half, config_.sequence_parallel ? sc.tp_rank() : -1);
  }
  const ops::DropoutArgs full = sc.Dropout(config_.hidden_dropout, layer_index_, site, seq_ * H);
  return config_.sequence_parallel ? SliceDropout(sc, full, seq_, H) : full;
}

absl::Status TransformerLayer::DropoutAdd(const StepContext& sc, const TensorView& branch,
                                          const TensorView* bias, int site,
                                          const TensorView& residual, const TensorView& out) const {
  if (sc.cp_size() == 1) {
    return ops::BiasDropoutAdd(*sc.exec, branch, bias, HiddenDropout(sc, site, 0), residual, out);
  }
  for (int h = 0; h < 2; ++h) {  // Context parallel: each chunk with its own keys.
    RETURN_IF_ERROR(ops::BiasDropoutAdd(*sc.exec, CpHalf(branch, h), bias,
                                        HiddenDropout(sc, site, h), CpHalf(residual, h),
                                        CpHalf(out, h)));
  }
  return absl::OkStatus();
}

absl::Status TransformerLayer::DropoutGrad(const StepContext& sc, const TensorView& dy, int site,
                                           const TensorView& dx) const {
  if (sc.cp_size() == 1) {
    return ops::DropoutBackward(*sc.exec, dy, HiddenDropout(sc, site, 0), dx);
  }
  for (int h = 0; h < 2; ++h) {
    RETURN_IF_ERROR(
        ops::DropoutBackward(*sc.exec, CpHalf(dy, h), HiddenDropout(sc, site, h), CpHalf(dx, h)));
  }
  return absl::OkStatus();
}

absl::Status TransformerLayer::CheckInput(const TensorView& x) const {
  if (x.rank() != 3 || x.dim(2) != config_.hidden || x.dtype != dtype_) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer layer ", layer_index_, ": input ", x.DebugString(), " must be ",
                     DTypeName(dtype_), "[B, T, ", config_.hidden, "] (the compute dtype)"));
  }
  return absl::OkStatus();
}

absl::Status TransformerLayer::Forward(const StepContext& sc, const TensorView& x,
                                       const TensorView* padding_mask, const TensorView& y) {
  RETURN_IF_ERROR(CheckInput(x));
  input_.Save(x, padding_mask);
  RETURN_IF_ERROR(ForwardImpl(sc, y));
  if (config_.recompute == Recompute::kYes) ReleaseAll();
  return absl::OkStatus();
}

absl::Status TransformerLayer::ForwardImpl(const StepContext& sc, const TensorView& y) {
  RETURN_IF_ERROR(Run(sc, Pass::kFull, input_.x(), y));
  saved_ = true;
  return absl::OkStatus();
}

absl::Status TransformerLayer::StartDecoding(const StepContext& sc, int64_t batch,
                                             int64_t max_length) {
  return attention_.StartDecoding(*sc.exec, batch, max_length);
}

absl::Status TransformerLayer::DecodeForward(const StepContext& sc, const TensorView& x,
                                             const TensorView& y) {
  RETURN_IF_ERROR(CheckInput(x));
  if (config_.sequence_parallel) {
    return absl::FailedPreconditionError(absl::StrCat(
        "transformer layer ", layer_index_, ": no incremental decoding with sequence parallelism"));
  }
  std::vector<DecodeSpan> spans;
  for (int64_t b = 0; b < x.dim(0); ++b) spans.push_back(DecodeSpan{b, x.dim(1)});
  return DecodeSlots(sc, x, spans, y);
}

absl::Status TransformerLayer::DecodeSlots(const StepContext& sc, const TensorView& x,
                                           absl::Span<const DecodeSpan> spans,
                                           const TensorView& y) {
  if (config_.sequence_parallel) {
    return absl::FailedPreconditionError(absl::StrCat(
        "transformer layer ", layer_index_, ": no incremental decoding with sequence parallelism"));
  }
  // The rows as one sequence [1, N, H] (the layer's row-wise ops do not care; the attention
  // reads the spans).
  const int64_t H = config_.hidden;
  if (x.numel() % H != 0 || y.numel() != x.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("transformer layer ", layer_index_,
                                                   ": decoding tensors ", x.DebugString(), ", ",
                                                   y.DebugString(), " must be [N, ", H, "]"));
  }
  ASSIGN_OR_RETURN(TensorView x3, x.Reshape({1, x.numel() / H, H}));
  ASSIGN_OR_RETURN(TensorView y3, y.Reshape({1, x.numel() / H, H}));
  RETURN_IF_ERROR(CheckInput(x3));
  // Nothing of a decoding step is kept for Backward.
  input_.Clear();
  saved_ = false;
  StepContext eval = sc;
  eval.mode = Mode::kEval;
  spans_ = spans;
  const absl::Status s = Run(eval, Pass::kDecode, x3, y3);
  spans_ = {};
  return s;
}

absl::Status TransformerLayer::Attend(const StepContext& sc, Pass pass, const TensorView& x,
                                      const TensorView& y, const TensorView** bias) {
  if (pass == Pass::kDecode) return attention_.DecodeSlots(sc, x, spans_, y, bias);
  return attention_.Forward(sc, x, input_.padding_mask(), y, bias);
}

absl::Status TransformerLayer::GatherInput(const StepContext& sc, const TensorView& x) {
  const Shape full = {x.dim(0), x.dim(1) * sc.tp_size(), x.dim(2)};
  RETURN_IF_ERROR(gather_->Ensure(*sc.exec, full, dtype_));
  if (sc.tp == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transformer layer ", layer_index_, ": sequence parallelism without a TP communicator"));
  }
  return comm::GatherFromSequenceParallelRegionForward(*sc.tp, x, gather_->input.view());
}

absl::Status TransformerLayer::AttentionBranch(const StepContext& sc, Pass pass,
                                               const TensorView& x, const TensorView** bias) {
  if (!config_.sequence_parallel) return Attend(sc, pass, x, branch_.view(), bias);
  RETURN_IF_ERROR(GatherInput(sc, x));
  RETURN_IF_ERROR(Attend(sc, pass, gather_->input.view(), gather_->full_a.view(), bias));
  return comm::ReduceScatterToSequenceParallelRegionForward(*sc.tp, gather_->full_a.view(),
                                                            branch_.view());
}

absl::Status TransformerLayer::MlpBranch(const StepContext& sc, const TensorView& x,
                                         const TensorView** bias) {
  ASSIGN_OR_RETURN(TensorView branch, As2D(branch_.view()));
  if (!config_.sequence_parallel) {
    ASSIGN_OR_RETURN(TensorView x2, As2D(x));
    return mlp_->Forward(sc, x2, branch, bias);
  }
  RETURN_IF_ERROR(GatherInput(sc, x));
  ASSIGN_OR_RETURN(TensorView in, As2D(gather_->input.view()));
  ASSIGN_OR_RETURN(TensorView partial, As2D(gather_->full_a.view()));
  RETURN_IF_ERROR(mlp_->Forward(sc, in, partial, bias));
  return comm::ReduceScatterToSequenceParallelRegionForward(*sc.tp, gather_->full_a.view(),
                                                            branch_.view());
}

absl::Status TransformerLayer::AttentionBranchBackward(const StepContext& sc, const TensorView& x,
                                                       const TensorView& dy, const TensorView& dx) {
  if (!config_.sequence_parallel) return attention_.Backward(sc, dy, dx);
  RETURN_IF_ERROR(GatherInput(sc, x));
  const TensorView dy_full = gather_->full_a.view(), dx_full = gather_->full_b.view();
  RETURN_IF_ERROR(comm::ReduceScatterToSequenceParallelRegionBackward(*sc.tp, dy, dy_full));
  RETURN_IF_ERROR(attention_.Backward(sc, dy_full, dx_full));
  return comm::GatherFromSequenceParallelRegionBackward(*sc.tp, dx_full, dx);
}

absl::Status TransformerLayer::MlpBranchBackward(const StepContext& sc, const TensorView& x,
                                                 const TensorView& dy, const TensorView& dx) {
  if (!config_.sequence_parallel) {
    ASSIGN_OR_RETURN(TensorView dy2, As2D(dy));
    ASSIGN_OR_RETURN(TensorView dx2, As2D(dx));
    return mlp_->Backward(sc, dy2, dx2);
  }
  RETURN_IF_ERROR(GatherInput(sc, x));
  RETURN_IF_ERROR(
      comm::ReduceScatterToSequenceParallelRegionBackward(*sc.tp, dy, gather_->full_a.view()));
  ASSIGN_OR_RETURN(TensorView dy2, As2D(gather_->full_a.view()));
  ASSIGN_OR_RETURN(TensorView dx2, As2D(gather_->full_b.view()));
  RETURN_IF_ERROR(mlp_->Backward(sc, dy2, dx2));
  return comm::GatherFromSequenceParallelRegionBackward(*sc.tp, gather_->full_b.view(), dx);
}

absl::Status TransformerLayer::Run(const StepContext& sc, Pass pass, const TensorView& x,
                                   const TensorView& y) {
  const int64_t B = x.dim(0), T = x.dim(1), H = config_.hidden;
  B_ = B;
  T_ = T;
  seq_ = config_.sequence_parallel ? T * sc.tp_size() : T;
  const ExecContext& ec = *sc.exec;
  // The buffers keep their [B, T, H] shape (the attention reads B and T from its input's), so a
  // step of another shape with the same element count needs new ones too.
  auto ensure = [&](Tensor* t) -> absl::Status {
    if (t->shape() == Shape{B, T, H} && t->device() == ec.device) return absl::OkStatus();
    ASSIGN_OR_RETURN(*t, Alloc(ec, {B, T, H}, dtype_));
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(TensorView x2, As2D(x));
  ASSIGN_OR_RETURN(TensorView y2, As2D(y));
  RETURN_IF_ERROR(ensure(&x1_));
  RETURN_IF_ERROR(ensure(&branch_));
  ASSIGN_OR_RETURN(TensorView x1, As2D(x1_.view()));
  ASSIGN_OR_RETURN(TensorView branch, As2D(branch_.view()));
  // Each residual branch ends in a RowParallelLinear whose bias (when it is not already in the
  // GEMM's epilogue) is fused with the hidden dropout and the residual add: out = residual +
  // dropout(branch + bias). The backward is unchanged: DropoutBackward gives the gradient with
  // respect to branch + bias, which is what the RowParallelLinear's Backward takes.
  const TensorView* bias = nullptr;
  if (config_.norm == NormPosition::kPreNorm) {
    RETURN_IF_ERROR(ensure(&ln1_out_));
    RETURN_IF_ERROR(ensure(&ln2_out_));
    ASSIGN_OR_RETURN(TensorView ln1, As2D(ln1_out_.view()));
    ASSIGN_OR_RETURN(TensorView ln2, As2D(ln2_out_.view()));
    RETURN_IF_ERROR(ln1_->Forward(sc, x2, ln1));
    RETURN_IF_ERROR(AttentionBranch(sc, pass, ln1_out_.view(), &bias));
    RETURN_IF_ERROR(DropoutAdd(sc, branch, bias, kAttentionOutputDropoutSite, x2, x1));
    RETURN_IF_ERROR(ln2_->Forward(sc, x1, ln2));
    RETURN_IF_ERROR(MlpBranch(sc, ln2_out_.view(), &bias));
    RETURN_IF_ERROR(DropoutAdd(sc, branch, bias, kMlpOutputDropoutSite, x1, y2));
  } else {
    RETURN_IF_ERROR(ensure(&s1_));
    RETURN_IF_ERROR(ensure(&s2_));
    ASSIGN_OR_RETURN(TensorView s1, As2D(s1_.view()));
    ASSIGN_OR_RETURN(TensorView s2, As2D(s2_.view()));
    RETURN_IF_ERROR(AttentionBranch(sc, pass, x, &bias));
    RETURN_IF_ERROR(DropoutAdd(sc, branch, bias, kAttentionOutputDropoutSite, x2, s1));
    RETURN_IF_ERROR(ln1_->Forward(sc, s1, x1));
    RETURN_IF_ERROR(MlpBranch(sc, x1_.view(), &bias));
    RETURN_IF_ERROR(DropoutAdd(sc, branch, bias, kMlpOutputDropoutSite, x1, s2));
    RETURN_IF_ERROR(ln2_->Forward(sc, s2, y2));
  }
  return absl::OkStatus();
}

void TransformerLayer::ReleaseAll() {
  attention_.Release();
  mlp_->Release();
  ln1_->Release();
  ln2_->Release();
  for (Tensor* t : {&ln1_out_, &x1_, &ln2_out_, &s1_, &s2_, &branch_}) *t = Tensor();
  saved_ = false;
}

int64_t TransformerLayer::ActivationBytes() const {
  int64_t n = attention_.ActivationBytes() + mlp_->ActivationBytes() + ln1_->ActivationBytes() +
              ln2_->ActivationBytes();
  for (const Tensor* t : {&ln1_out_, &x1_, &ln2_out_, &s1_, &s2_, &branch_}) n += t->nbytes();
  return n;
}

absl::Status TransformerLayer::Backward(const StepContext& sc, const TensorView& dy,
                                        const TensorView& dx) {
  if (input_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("transformer layer ", layer_index_,
                     ": Backward without a Forward (a decoding step "
                     "keeps nothing for Backward)"));
  }
  if (!saved_) {
    // Activation checkpointing: recompute this layer's forward (same masks) into scratch.
    ASSIGN_OR_RETURN(Tensor scratch, Alloc(*sc.exec, input_.x().shape, dtype_));
    RETURN_IF_ERROR(ForwardImpl(sc, scratch.view()));
  }
  backward_peak_bytes_ = ActivationBytes();
  // Sequence parallel: the norms' gradients of this backward are partial sums over positions.
  RETURN_IF_ERROR(norm_grads_.Begin(sc, *store_));
  RETURN_IF_ERROR(BackwardImpl(sc, dy, dx));
  RETURN_IF_ERROR(norm_grads_.End(sc, *store_));
  if (config_.recompute == Recompute::kYes) ReleaseAll();
  return absl::OkStatus();
}

absl::Status TransformerLayer::BackwardImpl(const StepContext& sc, const TensorView& dy,
                                            const TensorView& dx) {
  const ExecContext& ec = *sc.exec;
  const int64_t B = B_, T = T_, H = config_.hidden;
  ASSIGN_OR_RETURN(TensorView dy2, As2D(dy));
  ASSIGN_OR_RETURN(TensorView dx2, As2D(dx));
  ASSIGN_OR_RETURN(Tensor d_a, Alloc(ec, {B, T, H}, dtype_));  // Gradient of the running residual.
  ASSIGN_OR_RETURN(Tensor d_b, Alloc(ec, {B, T, H}, dtype_));  // Gradient inside a branch.
  ASSIGN_OR_RETURN(Tensor d_c, Alloc(ec, {B, T, H}, dtype_));
  ASSIGN_OR_RETURN(TensorView da, As2D(d_a.view()));
  ASSIGN_OR_RETURN(TensorView db, As2D(d_b.view()));
  ASSIGN_OR_RETURN(TensorView dc, As2D(d_c.view()));
  if (config_.norm == NormPosition::kPreNorm) {
    // y = x1 + drop(mlp(LN2(x1))): dx1 = dy + LN2'(mlp'(drop'(dy))).
    RETURN_IF_ERROR(DropoutGrad(sc, dy2, kMlpOutputDropoutSite, db));
    RETURN_IF_ERROR(MlpBranchBackward(sc, ln2_out_.view(), d_b.view(), d_c.view()));
    RETURN_IF_ERROR(ln2_->Backward(sc, dc, db));
    RETURN_IF_ERROR(ops::Add(ec, dy2, db, da));  // da = dx1
    // x1 = x + drop(attn(LN1(x))): dx = dx1 + LN1'(attn'(drop'(dx1))).
    RETURN_IF_ERROR(DropoutGrad(sc, da, kAttentionOutputDropoutSite, db));
    RETURN_IF_ERROR(AttentionBranchBackward(sc, ln1_out_.view(), d_b.view(), d_c.view()));
    RETURN_IF_ERROR(ln1_->Backward(sc, dc, db));
    RETURN_IF_ERROR(ops::Add(ec, da, db, dx2));
  } else {
    // y = LN2(s2), s2 = x1 + drop(mlp(x1)).
    RETURN_IF_ERROR(ln2_->Backward(sc, dy2, da));  // da = ds2
    RETURN_IF_ERROR(DropoutGrad(sc, da, kMlpOutputDropoutSite, db));
    RETURN_IF_ERROR(MlpBranchBackward(sc, x1_.view(), d_b.view(), d_c.view()));
    RETURN_IF_ERROR(ops::Add(ec, da, dc, db));  // db = dx1
    // x1 = LN1(s1), s1 = x + drop(attn(x)).
    RETURN_IF_ERROR(ln1_->Backward(sc, db, da));  // da = ds1
    RETURN_IF_ERROR(DropoutGrad(sc, da, kAttentionOutputDropoutSite, db));
    RETURN_IF_ERROR(AttentionBranchBackward(sc, input_.x(), d_b.view(), d_c.view()));
    RETURN_IF_ERROR(ops::Add(ec, da, dc, dx2));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- TransformerStack

absl::StatusOr<std::unique_ptr<TransformerStack>> TransformerStack::Create(
    ParameterStore* store, const std::string& prefix, int num_layers,
    const TransformerLayerConfig& config) {
  return Create(store, prefix, num_layers, LayerSpec{config});
}

LayerFactory TransformerLayers(const LayerSpec& spec) {
  auto gather = std::make_shared<GatherBuffers>();
  return [spec, gather](ParameterStore* s, const std::string& p,
                        int i) -> absl::StatusOr<std::unique_ptr<Layer>> {
    ASSIGN_OR_RETURN(std::unique_ptr<TransformerLayer> layer,
                     TransformerLayer::Create(s, p, i, spec));
    // Sequence parallel: one set of gather buffers for the stack (the layers run one at a time).
    if (spec.config.sequence_parallel) layer->ShareGatherBuffers(gather);
    return std::unique_ptr<Layer>(std::move(layer));
  };
}

absl::StatusOr<std::unique_ptr<TransformerStack>> TransformerStack::Create(
    ParameterStore* store, const std::string& prefix, int num_layers, const LayerSpec& spec) {
  return Create(store, prefix, num_layers, TransformerLayers(spec));
}

absl::StatusOr<std::unique_ptr<TransformerStack>> TransformerStack::Create(
    ParameterStore* store, const std::string& prefix, int num_layers, const LayerFactory& factory) {
  if (num_layers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_layers must be >= 1, got ", num_layers));
  }
  std::unique_ptr<TransformerStack> s(new TransformerStack());
  for (int i = 0; i < num_layers; ++i) {
    s->first_handles_.push_back(store->size());  // Handles are assigned in declaration order.
    ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer, factory(store, absl::StrCat(prefix, ".", i), i));
    if (layer == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("the layer factory returned no layer ", i, " without an error"));
    }
    s->layers_.push_back(std::move(layer));
  }
  return s;
}

absl::StatusOr<TensorView> TransformerStack::Forward(const StepContext& sc, const TensorView& x,
                                                     const TensorView* padding_mask) {
  const int L = num_layers();
  if (hidden_.size() != static_cast<size_t>(L + 1) || hidden_[0].shape() != x.shape ||
      hidden_[0].dtype() != x.dtype || hidden_[0].device() != sc.exec->device) {
    hidden_.clear();
    for (int i = 0; i <= L; ++i) {
      ASSIGN_OR_RETURN(Tensor h, Alloc(*sc.exec, x.shape, x.dtype));
      hidden_.push_back(std::move(h));
    }
  }
  RETURN_IF_ERROR(CopyTensor(*sc.exec, x, hidden_[0].view()));
  for (int i = 0; i < L; ++i) {
    RETURN_IF_ERROR(
        layers_[i]->Forward(sc, hidden_[i].view(), padding_mask, hidden_[i + 1].view()));
  }
  return hidden_[L].view();
}

absl::Status TransformerStack::Backward(const StepContext& sc, const TensorView& dy,
                                        const TensorView& dx) {
  ASSIGN_OR_RETURN(Tensor grad, Alloc(*sc.exec, dy.shape, dy.dtype));
  ASSIGN_OR_RETURN(Tensor next, Alloc(*sc.exec, dy.shape, dy.dtype));
  RETURN_IF_ERROR(CopyTensor(*sc.exec, dy, grad.view()));
  peak_backward_extra_ = 0;
  for (int i = num_layers() - 1; i >= 0; --i) {
    const int64_t before = layers_[i]->ActivationBytes();
    RETURN_IF_ERROR(layers_[i]->Backward(sc, grad.view(), next.view()));
    RETURN_IF_ERROR(sc.NotifyGradsReady(first_handles_[i]));
    std::swap(grad, next);
    peak_backward_extra_ =
        std::max(peak_backward_extra_, layers_[i]->backward_peak_bytes() - before);
  }
  return CopyTensor(*sc.exec, grad.view(), dx);
}

bool TransformerStack::sequence_parallel() const {
  for (const auto& l : layers_) {
    if (!l->sequence_parallel()) return false;
  }
  return true;
}

bool TransformerStack::context_parallel() const {
  for (const auto& l : layers_) {
    if (!l->context_parallel()) return false;
  }
  return true;
}

int64_t TransformerStack::HeldActivationBytes() const {
  int64_t n = 0;
  for (const auto& l : layers_) n += l->ActivationBytes();
  for (const Tensor& h : hidden_) n += h.nbytes();
  return n;
}

}  // namespace nn
}  // namespace mt
