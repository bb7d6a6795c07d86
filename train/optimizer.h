// The optimizer step of data- and tensor-parallel training: data-parallel gradient all-reduce
// (bucketed), gradient unscaling, inf/NaN detection (agreed by every rank), the global gradient
// L2 norm counted correctly across TP ranks (replicated parameters once), clipping, and AdamW with
// decoupled weight decay on the parameters whose spec asks for it (not biases or LayerNorm).
//
// Parameters, gradients and the Adam moments are f32 (the master weights). The moments use the
// ParameterStore's flat layout, so checkpoints can save them next to the values. With a bf16/f16
// compute dtype (mixed precision) an applied step ends by refreshing the store's compute-dtype
// weight copies from the updated masters; a skipped step leaves masters and copies untouched.
//
// With use_distributed_optimizer and a data-parallel group of two or more ranks (ZeRO stage 1,
// train/distributed_optimizer.h) the moments are this rank's shard only, the gradient buckets
// are reduce-scattered instead of all-reduced, the norm is summed from the shards, and the
// updated weights are all-gathered: the same AdamW kernel on the same values, so the same result
// as the unsharded optimizer (up to the rounding of the norm's sums). With a bf16/f16 compute
// dtype the f32 masters are sharded too and leave the store (masters_sharded(); read and set them
// through GatherValues/LoadValues). With one DP rank it is the unsharded optimizer (one shard is
// the whole state).
#ifndef MT_TRAIN_OPTIMIZER_H_
#define MT_TRAIN_OPTIMIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/exec_context.h"
#include "core/ops/adam.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "train/distributed_optimizer.h"
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
  // Shard the Adam moments over the data-parallel group (see the file comment).
  bool use_distributed_optimizer = false;
  // Megatron's --log_num_zeros_in_grad and --log_params_norm: StepStats::num_zeros and
  // params_norm (each one more reduction per step).
  bool log_num_zeros_in_grad = false;
  bool log_params_norm = false;
  absl::Status Validate() const;
};

// Expert parallelism: the groups over which the store's expert-parallel parameters
// (nn::ParamSpec::expert, each held by one rank of `ep`) are reduced. `ep`: the ranks holding
// different experts (their squared norms, zero counts and parameter norms are summed over it);
// `edp`: the data-parallel ranks holding the same experts (their gradients are summed over it
// instead of the whole DP group). Not owned; they must outlive the optimizer.
struct ExpertGroups {
  comm::Communicator* ep = nullptr;
  comm::Communicator* edp = nullptr;
};

struct StepStats {
  double grad_norm = 0;  // Global L2 norm after unscaling, before clipping (NaN/inf if found).
  bool skipped = false;  // inf/NaN found: parameters untouched.
  // With log_num_zeros_in_grad: the gradient elements that are exactly zero after unscaling, each
  // parameter counted once over the TP ranks, pipeline stages and DP shards; -1 otherwise.
  int64_t num_zeros = -1;
  // With log_params_norm: the L2 norm of the f32 master weights after the step, counted the same
  // way; -1 otherwise.
  double params_norm = -1;
};

class Optimizer {
 public:
  // The store must be allocated; the moments are allocated (zeroed) on its device. `dp`: the
  // data-parallel group the steps will reduce over, needed (and kept) for
  // use_distributed_optimizer and for expert parallelism; it must outlive the optimizer and be
  // the `dp` of every call. `experts`: for a store with expert-parallel parameters over an `ep`
  // of two or more ranks, whose gradients are then reduced over `experts.edp` in their own
  // buckets (the dense ones over `dp`); with use_distributed_optimizer the experts' state is
  // sharded over `experts.edp` and the dense parameters' over `dp` (Megatron's layout: two
  // DistributedOptimizerStates over the flat buffer's expert and dense runs, the moments this
  // rank holds being the dense shard followed by the expert shard), each expert counted once in
  // the norm (its shards summed over edp, the experts over ep). InvalidArgument without `dp`
  // or `experts.edp`.
  static absl::StatusOr<Optimizer> Create(nn::ParameterStore* store, const OptimizerConfig& config,
                                          comm::Communicator* dp = nullptr,
                                          const ExpertGroups& experts = {});
  // The expert-parallel group given to Create (null: none).
  comm::Communicator* expert_parallel() const { return experts_.ep; }

  // Starts an iteration's data-parallel gradient reduction (train/grad_reducer.h); returns the
  // listener for the StepContext of the iteration's last backward pass, or null (no overlap, or
  // no DP). Optional: Step() reduces whatever was not.
  nn::GradReadyListener* BeginGradReduce(comm::Communicator* dp) {
    reduce_begun_ = true;
    tied_pending_ = true;
    return reducer_->Begin(dp);
  }
  // Completes the reduction begun by BeginGradReduce (waits for the pending buckets, all-reduces
  // the rest): the gradients are then DP sums. With pipeline stages (set_pipeline) it also sums
  // the tied embedding's copies over the embedding group, once per iteration: after the DP
  // reduction (a two-term sum, the same bits on both stages), or with a distributed optimizer
  // before it (its reduce-scatter leaves each stage's own part of the copy reduced, and the parts
  // differ between the stages). Step() calls it if the caller has not.
  absl::Status FinishGradReduce();
  const GradReducer& grad_reducer() const { return *reducer_; }

  // Completes one step from the gradients accumulated in the store:
  //   g     =  DP-sum(grads) / grad_divisor        (grad_divisor = dp_size x micro-batches x loss
  //                                                  scale, so g is d(mean loss)/dθ; the stored
  //                                                  grads keep the sums: the division is folded
  //                                                  into the norm and Adam's gradient scale)
  //   norm  <- sqrt(TP-sum(split ||g||^2 + [tp_rank == 0] replicated ||g||^2))
  //   skip if norm is not finite; else clip by clip_grad / (norm + 1e-6), AdamW with `lr`, and
  //   store->RefreshComputeWeights (a no-op for f32 compute; sharded masters: the all-gather of
  //   the compute copies).
  // tp/dp may be null (size 1). Collective over both groups.
  absl::StatusOr<StepStats> Step(const ExecContext& ctx, comm::Communicator* tp,
                                 comm::Communicator* dp, double lr, double grad_divisor);

  // Pipeline parallelism: Step's gradient norm also sums over the stages of `pp` (null: no
  // pipeline), leaving out parameter `uncounted_handle` (-1: none), a copy of a parameter that
  // another stage counts (the last stage's tied word embedding), unless its gradient is not
  // finite (then every stage sees the inf/NaN and skips). FinishGradReduce sums the
  // gradient of parameter `tied_handle` (-1: none) over `embedding`. With a distributed optimizer,
  // parameter `tied_handle` (-1: none; the tied word embedding of the first and the last stage)
  // takes, after each update, the values of rank 0 of `embedding` (the first stage) on every
  // member: each stage reduce-scatters its copy's gradient at other offsets of its buffer, so the
  // sums (over 3 or more DP ranks) may round differently, and the first stage's copy is the
  // model's. The reduce-scatter of the buckets holding `tied_handle` waits for FinishGradReduce
  // (GradReducer::Hold), which the caller runs after summing that gradient over `embedding`.
  // Not owned; must outlive Step.
  void set_pipeline(comm::Communicator* pp, int uncounted_handle,
                    comm::Communicator* embedding = nullptr, int tied_handle = -1);

  // Whether this optimizer holds the f32 masters as DP shards (distributed, bf16/f16 compute): the
  // store then has none but those of its f32_compute parameters (nn/parameter.h), and they go
  // with the optimizer: once it is destroyed (or when Create fails after sharding them, out of
  // memory for the moments, which ends the job) the store keeps its compute weights only.
  bool masters_sharded() const;
  // The whole f32 masters in the store's flat layout, written to `host_values` (f32
  // [NumLocalElements()] in host memory) on every rank: gathered over the DP group bucket by
  // bucket when masters_sharded() (collective then; no whole copy on the device), a copy of the
  // store's otherwise. InvalidArgument for another buffer.
  absl::Status GatherValues(const ExecContext& ctx, const TensorView& host_values) const;
  // Sets the masters, and the compute copies from them, from whole ones in the store's flat
  // layout (f32 [NumLocalElements()] on the host); sharded masters keep this rank's shard. Local.
  absl::Status LoadValues(const ExecContext& ctx, const TensorView& host_values);

  // Megatron's timers of the reductions and the optimizer's parts (train/timers.h); null: none.
  // Not owned.
  void set_timers(nn::StepTimers* timers) { timers_ = timers; }

  // Called by Step right before it changes the masters and the moments (after the gradient norm),
  // e.g. to wait for an --async_save snapshot still copying them (train/async_save.h); empty:
  // none. Runs on the calling thread.
  void set_before_update(std::function<void()> hook) { before_update_ = std::move(hook); }

  // Adam steps taken (skipped steps excluded).
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // Whether the moments are sharded (use_distributed_optimizer over two or more DP ranks).
  bool distributed() const { return dist_ != nullptr; }
  const DistributedOptimizerState* distributed_state() const { return dist_.get(); }
  // The moments this rank holds: the store's flat layout, or (distributed) this rank's shard
  // (f32 [distributed_state()->shard_elements()]); and per-parameter views (not distributed).
  TensorView exp_avg() const { return m_.view(); }
  TensorView exp_avg_sq() const { return v_.view(); }
  TensorView exp_avg(int handle) const;
  TensorView exp_avg_sq(int handle) const;
  // Distributed: the whole state in the store's flat layout on DP rank 0 only, for checkpoints:
  // `exp_avg`, `exp_avg_sq` and, when masters_sharded(), `values` (f32 [NumLocalElements()] in
  // host memory there; ignored, and may be empty, on the other ranks, and `values` also when the
  // store holds the masters). Every rank's shards go to DP rank 0 part by part, so no rank holds
  // a whole copy on its device. Collective over the DP group; FailedPrecondition when not
  // distributed (read the live tensors).
  absl::Status GatherStateToRoot(const ExecContext& ctx, const TensorView& values,
                                 const TensorView& exp_avg, const TensorView& exp_avg_sq) const;
  // Sets the moments from whole ones in the store's flat layout (f32 [NumLocalElements()], host
  // or the store's device); a distributed optimizer keeps its shard of them. Local.
  absl::Status LoadMoments(const ExecContext& ctx, const TensorView& exp_avg,
                           const TensorView& exp_avg_sq);

 private:
  Optimizer() = default;
  // The sum of fn over this rank's share of the gradients (grads) or of the f32 masters, each
  // parameter counted once over TP ranks, pipeline stages and DP shards (the copy another stage
  // counts as `copy` says), summed over those groups as `reduce` (kI64 for counts, kF32 for sums
  // of squares); the local sum itself, unrounded, when there is no group to sum over.
  absl::StatusOr<double> UniqueSum(
      comm::Communicator* tp, bool grads, DType reduce, CopySum copy,
      const std::function<absl::StatusOr<double>(const TensorView&)>& fn) const;
  // AdamW with `args` (weight decay where the spec asks for it) on what this rank updates.
  absl::Status Update(const ExecContext& ctx, const ops::AdamArgs& args);
  // Distributed with expert parallelism: dist_ over the dense runs and `dp`, edist_ over the
  // expert runs and experts_.edp, and the reducer over both.
  absl::Status CreateExpertStates(comm::Communicator* dp);
  // The dense and the expert shard of a moment tensor (m_, v_) when edist_ is set.
  TensorView DenseMoment(const Tensor& t) const;
  TensorView ExpertMoment(const Tensor& t) const;

  nn::ParameterStore* store_ = nullptr;
  OptimizerConfig config_;
  ExpertGroups experts_;  // ep set only when it has two or more ranks and the store experts.
  std::unique_ptr<DistributedOptimizerState> dist_;   // Null unless distributed.
  std::unique_ptr<DistributedOptimizerState> edist_;  // The experts' (expert parallelism).
  std::unique_ptr<GradReducer> reducer_;
  bool reduce_begun_ = false;
  bool tied_pending_ = false;  // The tied embedding's copies are still to be summed.
  Tensor m_, v_;
  int64_t step_ = 0;
  comm::Communicator* pp_ = nullptr;
  int uncounted_handle_ = -1;
  comm::Communicator* embedding_ = nullptr;
  int tied_handle_ = -1;
  nn::StepTimers* timers_ = nullptr;
  std::function<void()> before_update_;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_OPTIMIZER_H_
