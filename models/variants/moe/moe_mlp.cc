#include "models/variants/moe/moe_mlp.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/status.h"
#include "nn/linear.h"

namespace mt {
namespace models {
namespace moe {
namespace {

// A host f32 copy of `t` (any float dtype, on ec's device): `view`, which may point into the
// tensors kept here or into `t` itself.
struct HostCopy {
  Tensor f32, host;
  TensorView view;
};
absl::Status ToHostF32(const ExecContext& ec, const TensorView& t, HostCopy* c) {
  TensorView src = t;
  if (t.dtype != DType::kF32) {
    ASSIGN_OR_RETURN(c->f32, Alloc(ec, t.shape, DType::kF32));
    RETURN_IF_ERROR(ops::Convert(ec, t, c->f32.view()));
    src = c->f32.view();
  }
  ASSIGN_OR_RETURN(c->view, OnHost(ec, src, &c->host, "moe host copy"));
  return absl::OkStatus();
}

// dst (any float dtype, on ec's device) <- host f32 `h` of the same shape.
absl::Status FromHostF32(const ExecContext& ec, const TensorView& h, const TensorView& dst) {
  Tensor staging;
  ASSIGN_OR_RETURN(TensorView d, OnDevice(ec, h, &staging, "moe host result"));
  return ops::Convert(ec, d, dst);
}

// *t holds [rows, cols] of `dtype` on ec's device (reallocated only when the shape changes).
absl::Status Ensure(const ExecContext& ec, int64_t rows, int64_t cols, DType dtype, Tensor* t) {
  if (t->numel() == rows * cols && !t->empty() && t->shape()[0] == rows &&
      t->device() == ec.device && t->dtype() == dtype) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*t, Alloc(ec, {rows, cols}, dtype));
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------- MoeStats

int MoeStats::AddLayer(int experts) {
  aux_.push_back(0);
  z_.push_back(0);
  routed_.emplace_back(experts, 0);
  dropped_.push_back(0);
  return layers() - 1;
}

void MoeStats::Record(int layer, const Routing& r) {
  aux_[layer] = r.aux_loss;
  z_[layer] = r.z_loss;
  routed_[layer] = r.routed;
  dropped_[layer] = r.dropped();
}

double MoeStats::aux_loss() const {
  double s = 0;
  for (double a : aux_) s += a;
  return s;
}

std::vector<double> MoeStats::Loads() const {
  std::vector<double> load(routed_.empty() ? 0 : routed_[0].size(), 0.0);
  double all = 0;
  for (const std::vector<int64_t>& layer : routed_) {
    for (size_t e = 0; e < layer.size(); ++e) {
      load[e] += static_cast<double>(layer[e]);
      all += static_cast<double>(layer[e]);
    }
  }
  for (double& l : load) l = all > 0 ? l / all : 0.0;
  return load;
}

double MoeStats::z_loss() const {
  double s = 0;
  for (double z : z_) s += z;
  return s;
}

// ---------------------------------------------------------------- MoeMlp

absl::StatusOr<std::unique_ptr<MoeMlp>> MoeMlp::Create(
    nn::ParameterStore* store, const std::string& prefix, const nn::TransformerLayerConfig& config,
    const RouterOptions& options, std::shared_ptr<MoeStats> stats, comm::Communicator* ep) {
  if (options.topk < 1 || options.topk > options.experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe: moe_router_topk ", options.topk,
                     " must be in [1, num_experts = ", options.experts, "]"));
  }
  if (config.tp_reduce != nn::TpReduce::kYes) {
    return absl::InvalidArgumentError(
        "moe: the experts reduce their output inside the layer; sequence parallelism and "
        "partial-output blocks are not supported");
  }
  if (ep != nullptr && options.experts % ep->size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe: num_experts ", options.experts,
                     " is not divisible by expert_model_parallel_size ", ep->size()));
  }
  std::unique_ptr<MoeMlp> m(new MoeMlp(ep, options.experts));
  m->options_ = options;
  m->stats_ = std::move(stats);
  m->layer_ = m->stats_->AddLayer(options.experts);
  m->dtype_ = store->compute_dtype();
  m->hidden_ = config.hidden;
  ASSIGN_OR_RETURN(m->router_,
                   nn::ReplicatedLinear::Create(store, prefix + ".router", config.hidden,
                                                options.experts, nn::Bias::kNo, config.init_std));
  // Only this rank's experts, under their global indices; with EP they are expert-parallel
  // parameters (the optimizer reduces them over the expert-data-parallel group).
  const int first = m->dispatcher_.first_expert();
  for (int e = first; e < first + m->dispatcher_.local_experts(); ++e) {
    const int begin = store->size();
    ASSIGN_OR_RETURN(nn::SwiGluMLP expert,
                     nn::SwiGluMLP::Create(store, absl::StrCat(prefix, ".experts.", e),
                                           config.hidden, config.ffn, config.init_std,
                                           config.output_init_std, nn::TpReduce::kPartial));
    if (m->dispatcher_.active()) {
      for (int h = begin; h < store->size(); ++h) store->MarkExpert(h);
    }
    m->experts_.push_back(std::make_unique<nn::SwiGluMLP>(std::move(expert)));
  }
  return m;
}

absl::Status MoeMlp::Forward(const nn::StepContext& sc, const TensorView& x, const TensorView& y,
                             const TensorView** deferred_bias) {
  (void)deferred_bias;  // No bias: the caller's stays null.
  const ExecContext& ec = *sc.exec;
  if (x.rank() != 2 || x.dim(1) != hidden_ || x.dtype != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat("moe: input must be [N, ", hidden_, "] ",
                                                   DTypeName(dtype_), ", got ", x.DebugString()));
  }
  const int64_t N = x.dim(0), H = hidden_;
  x_ = x;
  RETURN_IF_ERROR(Ensure(ec, N, options_.experts, dtype_, &logits_));
  RETURN_IF_ERROR(router_.Forward(sc, x, logits_.view()));
  HostCopy logits;
  RETURN_IF_ERROR(ToHostF32(ec, logits_.view(), &logits));
  const float* lf = logits.view.data_as<float>();
  const std::vector<double> l(lf, lf + N * options_.experts);
  routing_ = Route(l.data(), N, options_);
  stats_->Record(layer_, routing_);
  const int64_t R = routing_.rows();
  ids_host_ = Tensor::Host({R}, DType::kI32);
  for (int64_t r = 0; r < R; ++r) ids_host_.data_as<int32_t>()[r] = routing_.token_of_row[r];
  Tensor staging;
  ASSIGN_OR_RETURN(TensorView ids, OnDevice(ec, ids_host_.view(), &staging, "moe dispatch ids"));
  ids_ = std::move(staging);  // Empty when the host ids serve (the CPU).
  RETURN_IF_ERROR(Ensure(ec, R, H, dtype_, &xp_));
  RETURN_IF_ERROR(Ensure(ec, R, H, dtype_, &out_));
  RETURN_IF_ERROR(ops::Embedding(ec, ids, x, xp_.view()));
  RETURN_IF_ERROR(RunExperts(sc));
  saved_ = true;
  return Combine(ec, y);
}

absl::Status MoeMlp::RunExperts(const nn::StepContext& sc) {
  const ExecContext& ec = *sc.exec;
  if (!dispatcher_.active()) {
    for (int e = 0; e < options_.experts; ++e) {
      const int64_t a = routing_.offsets[e], b = routing_.offsets[e + 1];
      if (a == b) continue;  // No tokens: nothing to run.
      RETURN_IF_ERROR(experts_[e]->Forward(sc, xp_.view().Slice(a, b), out_.view().Slice(a, b)));
    }
    return nn::GForward(sc, out_.view());
  }
  RETURN_IF_ERROR(dispatcher_.Plan(ec, routing_.offsets));
  const std::vector<int64_t>& off = dispatcher_.local_offsets();
  ASSIGN_OR_RETURN(xl_, Alloc(ec, {dispatcher_.local_rows(), hidden_}, dtype_));
  ASSIGN_OR_RETURN(Tensor ol, Alloc(ec, {dispatcher_.local_rows(), hidden_}, dtype_));
  RETURN_IF_ERROR(dispatcher_.Dispatch(sc, xp_.view(), xl_.view()));
  for (int i = 0; i < dispatcher_.local_experts(); ++i) {
    if (off[i] == off[i + 1]) continue;
    RETURN_IF_ERROR(experts_[i]->Forward(sc, xl_.view().Slice(off[i], off[i + 1]),
                                         ol.view().Slice(off[i], off[i + 1])));
  }
  RETURN_IF_ERROR(nn::GForward(sc, ol.view()));
  return dispatcher_.Return(sc, ol.view(), out_.view());
}

absl::Status MoeMlp::ExpertsBackward(const nn::StepContext& sc, const TensorView& dout,
                                     const TensorView& dxp) {
  if (!dispatcher_.active()) {
    for (int e = 0; e < options_.experts; ++e) {
      const int64_t a = routing_.offsets[e], b = routing_.offsets[e + 1];
      if (a == b) continue;
      RETURN_IF_ERROR(experts_[e]->Backward(sc, dout.Slice(a, b), dxp.Slice(a, b)));
    }
    return absl::OkStatus();
  }
  const ExecContext& ec = *sc.exec;
  const std::vector<int64_t>& off = dispatcher_.local_offsets();
  ASSIGN_OR_RETURN(Tensor dl, Alloc(ec, xl_.shape(), dtype_));
  ASSIGN_OR_RETURN(Tensor dxl, Alloc(ec, xl_.shape(), dtype_));
  RETURN_IF_ERROR(dispatcher_.Dispatch(sc, dout, dl.view()));
  for (int i = 0; i < dispatcher_.local_experts(); ++i) {
    if (off[i] == off[i + 1]) continue;
    RETURN_IF_ERROR(experts_[i]->Backward(sc, dl.view().Slice(off[i], off[i + 1]),
                                          dxl.view().Slice(off[i], off[i + 1])));
  }
  return dispatcher_.Return(sc, dxl.view(), dxp);
}

absl::Status MoeMlp::Combine(const ExecContext& ec, const TensorView& y) {
  const int64_t N = routing_.tokens, H = hidden_;
  const int k = routing_.topk;
  HostCopy out;
  RETURN_IF_ERROR(ToHostF32(ec, out_.view(), &out));
  const float* o = out.view.data_as<float>();
  Tensor yh = Tensor::Host({N, H}, DType::kF32);
  float* yp = yh.data_as<float>();
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      double s = 0;
      for (int j = 0; j < k; ++j) {
        const int64_t row = routing_.row[t * k + j];
        if (row >= 0) s += routing_.gate[t * k + j] * o[row * H + h];
      }
      yp[t * H + h] = static_cast<float>(s);
    }
  }
  return FromHostF32(ec, yh.view(), y);
}

absl::Status MoeMlp::CombineBackward(const ExecContext& ec, const TensorView& dy,
                                     std::vector<double>* dgate, Tensor* dout_dev) {
  const int64_t N = routing_.tokens, H = hidden_, R = routing_.rows();
  const int k = routing_.topk;
  HostCopy out, grad;
  RETURN_IF_ERROR(ToHostF32(ec, out_.view(), &out));
  RETURN_IF_ERROR(ToHostF32(ec, dy, &grad));
  const float* o = out.view.data_as<float>();
  const float* g = grad.view.data_as<float>();
  Tensor dout = Tensor::Host({R, H}, DType::kF32);
  float* d = dout.data_as<float>();
  dgate->assign(N * k, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t slot = routing_.slot_of_row[r], t = slot / k;
    const double gate = routing_.gate[slot];
    double dot = 0;
    for (int64_t h = 0; h < H; ++h) {
      dot += static_cast<double>(g[t * H + h]) * o[r * H + h];
      d[r * H + h] = static_cast<float>(gate * g[t * H + h]);
    }
    (*dgate)[slot] = dot;
  }
  ASSIGN_OR_RETURN(*dout_dev, Alloc(ec, {R, H}, dtype_));
  return FromHostF32(ec, dout.view(), dout_dev->view());
}

absl::Status MoeMlp::Backward(const nn::StepContext& sc, const TensorView& dy,
                              const TensorView& dx) {
  if (!saved_) return absl::FailedPreconditionError("moe: Backward without Forward");
  const ExecContext& ec = *sc.exec;
  std::vector<double> dgate;
  Tensor dout;  // [R, H]
  RETURN_IF_ERROR(CombineBackward(ec, dy, &dgate, &dout));
  // The experts' input gradients into out_ (no longer needed), scattered back to the tokens.
  RETURN_IF_ERROR(ExpertsBackward(sc, dout.view(), out_.view()));
  RETURN_IF_ERROR(SetZero(ec, dx));
  const TensorView ids = ids_.empty() ? ids_host_.view() : ids_.view();
  RETURN_IF_ERROR(ops::EmbeddingBackward(ec, ids, out_.view(), dx));
  RETURN_IF_ERROR(nn::FBackward(sc, dx));
  RETURN_IF_ERROR(RouterBackward(sc, dgate, dx));
  Release();
  return absl::OkStatus();
}

absl::Status MoeMlp::RouterBackward(const nn::StepContext& sc, const std::vector<double>& dgate,
                                    const TensorView& dx) {
  const ExecContext& ec = *sc.exec;
  const int64_t N = routing_.tokens;
  Tensor dl = Tensor::Host({N, options_.experts}, DType::kF32);
  moe::RouterBackward(routing_, options_, dgate.data(), stats_->loss_scale, dl.data_as<float>());
  RETURN_IF_ERROR(FromHostF32(ec, dl.view(), logits_.view()));
  ASSIGN_OR_RETURN(Tensor dxr, Alloc(ec, dx.shape, dtype_));
  RETURN_IF_ERROR(router_.Backward(sc, x_, logits_.view(), dxr.view()));
  return ops::Add(ec, dx, dxr.view(), dx);
}

void MoeMlp::Release() {
  for (auto& e : experts_) e->Release();
  for (Tensor* t : {&logits_, &xp_, &out_, &xl_, &ids_}) *t = Tensor();
  saved_ = false;
}

int64_t MoeMlp::ActivationBytes() const {
  int64_t bytes = logits_.nbytes() + xp_.nbytes() + out_.nbytes() + xl_.nbytes();
  for (const auto& e : experts_) bytes += e->ActivationBytes();
  return bytes;
}

nn::MlpFactory MoeMlpFactory(const RouterOptions& options, std::shared_ptr<MoeStats> stats,
                             comm::Communicator* ep) {
  return [options, stats, ep](
             nn::ParameterStore* store, const std::string& prefix,
             const nn::TransformerLayerConfig& config) -> absl::StatusOr<std::unique_ptr<nn::Mlp>> {
    ASSIGN_OR_RETURN(std::unique_ptr<MoeMlp> m,
                     MoeMlp::Create(store, prefix, config, options, stats, ep));
    return std::unique_ptr<nn::Mlp>(std::move(m));
  };
}

}  // namespace moe
}  // namespace models
}  // namespace mt
