// A mixture-of-experts MLP (nn::Mlp, so that nn::TransformerLayer holds it where a dense MLP
// would be): a linear router over the layer input, top-k routing (routing.h), and E SwiGLU experts
// that each see only the tokens routed to them.
//
//   logits = x W_router                     [N, E]  "<prefix>.router.weight" [H, E], replicated
//   rows   = the routed (token, expert) slots, grouped by expert (routing.h: dispatch order)
//   xp     = x[token of each row]           [R, H]  (ops::Embedding as a row gather)
//   out_e  = SwiGLU_e(xp rows of expert e)  "<prefix>.experts.<e>.{gate,up,down}.weight",
//            tensor-parallel like nn::SwiGluMLP (gate/up split on F, down on F)
//   y[t]   = sum over t's kept slots of gate * out[row]
//
// An expert that gets no rows is skipped (its gradient stays what it was: nothing to add).
//
// Expert parallelism (an `ep` group of P > 1 ranks, expert_dispatch.h): a rank declares (under
// their global indices, marked ParamSpec::expert) and runs only its E / P experts, on the rows
// every rank of the group routed to them, exchanged by all-to-all before and after the experts
// (twice forward, twice backward). Its experts' gradient covers the tokens of the whole EP group;
// the optimizer sums it over the expert-data-parallel group (the DP ranks holding the same
// experts), which gives every expert the gradient of EP = 1.
//
// Tensor parallelism: every TP rank routes the same (replicated) tokens the same way; the experts
// run with TpReduce::kPartial and their partial outputs [R, H] are all-reduced once before the
// combine (g), so that the combine weights' gradient sees whole expert outputs; Backward sums the
// experts' partial input gradients and all-reduces them once (f), then adds the router's input
// gradient (complete on every rank). Exactly one all-reduce forward and one backward, as a dense
// MLP. The router's gradient is the same on every TP rank. A partial-output MLP
// (TransformerLayerConfig::tp_reduce = kPartial: sequence parallelism, parallel blocks) is refused.
//
// Routing, the combine and its backward run on the host in float64 from f32 copies of the logits,
// expert outputs and output gradient (core/alloc.h OnHost/OnDevice: free on the CPU, copies on a
// GPU); the router and the experts run on the store's device in its compute dtype. The load-
// balancing and z losses of the last Forward go into the model's MoeStats; Backward adds their
// gradient times MoeStats::loss_scale to the router's.
#ifndef MT_MODELS_VARIANTS_MOE_MOE_MLP_H_
#define MT_MODELS_VARIANTS_MOE_MOE_MLP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "models/variants/moe/expert_dispatch.h"
#include "models/variants/moe/routing.h"
#include "nn/context.h"
#include "nn/mlp.h"
#include "nn/parameter.h"
#include "nn/replicated_linear.h"
#include "nn/transformer.h"

namespace mt {
namespace models {
namespace moe {

// Shared by a model's MoE layers and the model: what each layer's last Forward measured, and the
// scale of the auxiliary losses' gradient (the loss_scale of the model's ForwardBackward). Not
// thread-safe: one model runs one pass at a time.
class MoeStats {
 public:
  // A slot for one more layer; returns its index.
  int AddLayer(int experts);
  void Record(int layer, const Routing& r);
  int layers() const { return static_cast<int>(aux_.size()); }
  // Sums over the layers of their last Forward.
  double aux_loss() const;
  double z_loss() const;
  // Each expert's share of the slots routed in the last Forward of every layer (before
  // dropping): [E], summing to 1.
  std::vector<double> Loads() const;
  // Slots routed to each expert in the last Forward of `layer` (before dropping), and dropped.
  const std::vector<int64_t>& routed(int layer) const { return routed_[layer]; }
  int64_t dropped(int layer) const { return dropped_[layer]; }

  double loss_scale = 1.0;

 private:
  std::vector<double> aux_, z_;
  std::vector<std::vector<int64_t>> routed_;
  std::vector<int64_t> dropped_;
};

class MoeMlp : public nn::Mlp {
 public:
  // Declares the router, then this rank's experts (all of them without `ep`), under `prefix`;
  // hidden, ffn (each expert's width), init_std and output_init_std from `config`; `ep`: the
  // expert-parallel group (null: every expert is held and runs here), which must outlive the
  // layer. InvalidArgument for options that are not
  // 1 <= topk <= experts, experts not divisible by the EP size, an ffn not divisible by TP, or
  // config.tp_reduce = kPartial.
  static absl::StatusOr<std::unique_ptr<MoeMlp>> Create(nn::ParameterStore* store,
                                                        const std::string& prefix,
                                                        const nn::TransformerLayerConfig& config,
                                                        const RouterOptions& options,
                                                        std::shared_ptr<MoeStats> stats,
                                                        comm::Communicator* ep = nullptr);
  // x: [N, H]; y: [N, H] (complete, all-reduced over TP).
  absl::Status Forward(const nn::StepContext& sc, const TensorView& x, const TensorView& y,
                       const TensorView** deferred_bias = nullptr) override;
  absl::Status Backward(const nn::StepContext& sc, const TensorView& dy,
                        const TensorView& dx) override;
  void Release() override;
  int64_t ActivationBytes() const override;
  // The routing of the last Forward.
  const Routing& routing() const { return routing_; }

 private:
  MoeMlp(comm::Communicator* ep, int experts) : dispatcher_(ep, experts) {}
  // xp_ through the experts into out_ (complete over TP), here or on their EP ranks.
  absl::Status RunExperts(const nn::StepContext& sc);
  // The experts' backward: dout [R, H] -> dxp [R, H] (this rank's TP partial input gradients).
  absl::Status ExpertsBackward(const nn::StepContext& sc, const TensorView& dout,
                               const TensorView& dxp);
  // y <- the combine of out_ (host f32 math).
  absl::Status Combine(const ExecContext& ec, const TensorView& y);
  // out_'s gradient into *dout [R, H] (compute dtype, allocated) and the gates' into dgate
  // (host f32 math).
  absl::Status CombineBackward(const ExecContext& ec, const TensorView& dy,
                               std::vector<double>* dgate, Tensor* dout);
  // The router's backward: its weight gradient, and its input gradient added to dx.
  absl::Status RouterBackward(const nn::StepContext& sc, const std::vector<double>& dgate,
                              const TensorView& dx);

  RouterOptions options_;
  std::shared_ptr<MoeStats> stats_;
  int layer_ = 0;  // This layer's slot in stats_.
  DType dtype_ = DType::kF32;
  int64_t hidden_ = 0;
  nn::ReplicatedLinear router_;
  std::vector<std::unique_ptr<nn::SwiGluMLP>> experts_;
  ExpertDispatcher dispatcher_;
  Routing routing_;
  bool saved_ = false;
  TensorView x_;           // [N, H] the caller's input
  Tensor logits_;          // [N, E] compute dtype
  Tensor ids_host_, ids_;  // i32 [R]: the token of each dispatch row (host; device copy)
  Tensor xp_, out_;        // [R, H] compute dtype: dispatched inputs, expert outputs
  Tensor xl_;              // [local rows, H]: the local experts' inputs (EP > 1)
};

// The factory nn::LayerSpec::mlp takes: MoeMlps sharing `stats`, over the expert-parallel group
// `ep` (null: none).
nn::MlpFactory MoeMlpFactory(const RouterOptions& options, std::shared_ptr<MoeStats> stats,
                             comm::Communicator* ep = nullptr);

}  // namespace moe
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_VARIANTS_MOE_MOE_MLP_H_
