// The optimizer step of data- and tensor-parallel training: data-parallel gradient all-reduce
// (bucketed), gradient unscaling, inf/NaN detection (agreed by every rank), the global gradient
// L2 norm counted correctly across TP ranks (replicated parameters once), clipping, and AdamW with
// decoupled weight decay on the parameters whose spec asks for it (not biases or LayerNorm).
//
// Parameters, gradients and the Adam moments are f32 (the master weights). The moments use the
// ParameterStore's flat layout, so checkpoints can save them next to the values. With a bf16/f16
// compute dtype (mixed precision) an applied step ends by refreshing the store's compute-dtype
// weight copies from the updated masters; a skipped step leaves masters and copies untouched.
#ifndef MT_TRAIN_OPTIMIZER_H_
#define MT_TRAIN_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "train/grad_reducer.h"

namespace mt {
namespace train {

struct OptimizerConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  double clip_grad = 1.0;                // <= 0 disables clipping.
  int64_t dp_bucket_elements = 1 << 22;  // Elements per data-parallel all-reduce.
  // Start each bucket's all-reduce during backward as soon as its gradients are final
  // (GradSyncListener); false: all buckets in Step().
  bool overlap_grad_reduce = true;
  absl::Status Validate() const;
};

struct StepStats {
  double grad_norm = 0;  // Global L2 norm after unscaling, before clipping (NaN/inf if found).
  bool skipped = false;  // inf/NaN found: parameters untouched.
};

class Optimizer {
 public:
  // The store must be allocated; the moments are allocated (zeroed) on its device.
  static absl::StatusOr<Optimizer> Create(nn::ParameterStore* store, const OptimizerConfig& config);

  // Starts an iteration's data-parallel gradient reduction (train/grad_reducer.h); returns the
  // listener for the StepContext of the iteration's last backward pass, or null (no overlap, or
  // no DP). Optional: Step() reduces whatever was not.
  nn::GradReadyListener* BeginGradReduce(comm::Communicator* dp) {
    reduce_begun_ = true;
    return reducer_->Begin(dp);
  }
  // Completes the reduction begun by BeginGradReduce (waits for the pending buckets, all-reduces
  // the rest): the gradients are then DP sums. Step() calls it if the caller has not.
  absl::Status FinishGradReduce() { return reducer_->Finish(); }
  const GradReducer& grad_reducer() const { return *reducer_; }

  // Completes one step from the gradients accumulated in the store:
  //   grads <- DP-sum(grads) / grad_divisor        (grad_divisor = dp_size x micro-batches x loss
  //                                                  scale, so grads become d(mean loss)/dθ)
  //   norm  <- sqrt(TP-sum(split ||g||^2 + [tp_rank == 0] replicated ||g||^2))
  //   skip if norm is not finite; else clip by clip_grad / (norm + 1e-6), AdamW with `lr`, and
  //   store->RefreshComputeWeights (a no-op for f32 compute).
  // tp/dp may be null (size 1). Collective over both groups.
  absl::StatusOr<StepStats> Step(const ExecContext& ctx, comm::Communicator* tp,
                                 comm::Communicator* dp, double lr, double grad_divisor);

  // Pipeline parallelism: Step's gradient norm also sums over the stages of `pp` (null: no
  // pipeline), leaving out parameter `uncounted_handle` (-1: none), a copy of a parameter that
  // another stage counts (the last stage's tied word embedding). Not owned; must outlive Step.
  void set_pipeline(comm::Communicator* pp, int uncounted_handle) {
    pp_ = pp;
    uncounted_handle_ = uncounted_handle;
  }

  // Adam steps taken (skipped steps excluded).
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // Moments in the store's flat layout, and per-parameter views of them.
  TensorView exp_avg() const { return m_.view(); }
  TensorView exp_avg_sq() const { return v_.view(); }
  TensorView exp_avg(int handle) const;
  TensorView exp_avg_sq(int handle) const;

 private:
  Optimizer() = default;
  absl::StatusOr<double> GlobalNormSquared(const ExecContext& ctx, comm::Communicator* tp) const;

  nn::ParameterStore* store_ = nullptr;
  OptimizerConfig config_;
  std::unique_ptr<GradReducer> reducer_;
  bool reduce_begun_ = false;
  Tensor m_, v_;
  int64_t step_ = 0;
  comm::Communicator* pp_ = nullptr;
  int uncounted_handle_ = -1;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_OPTIMIZER_H_
