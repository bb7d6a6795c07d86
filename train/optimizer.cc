#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "core/alloc.h"
#include "core/ops/adam.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace train {

absl::Status OptimizerConfig::Validate() const {
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps > 0)) {
    return absl::InvalidArgumentError("adam betas must be in [0, 1) and eps > 0");
  }
  if (!(weight_decay >= 0)) return absl::InvalidArgumentError("weight_decay must be >= 0");
  if (dp_bucket_elements < 1) return absl::InvalidArgumentError("dp bucket must be >= 1 element");
  return absl::OkStatus();
}

namespace {

// The gradient reducer of a store with expert-parallel parameters: buckets of at most
// config.dp_bucket_elements from the end of the flat buffer, none crossing between expert and
// dense parameters; the dense ones all-reduced over `dp`, the expert ones over `edp` (nothing to
// do when it has one rank).
std::unique_ptr<GradReducer> ExpertGradReducer(const nn::ParameterStore* store,
                                               const OptimizerConfig& config,
                                               comm::Communicator* dp, comm::Communicator* edp) {
  std::vector<std::pair<int64_t, int64_t>> buckets;
  std::vector<bool> expert;
  for (int last = store->size() - 1; last >= 0;) {
    int first = last;
    while (first > 0 && store->spec(first - 1).expert == store->spec(last).expert) --first;
    const int64_t begin = store->offset(first);
    const int64_t end = store->offset(last) + NumElements(store->local_shape(last));
    for (int64_t e = end; e > begin; e -= config.dp_bucket_elements) {
      buckets.push_back({std::max(begin, e - config.dp_bucket_elements), e});
      expert.push_back(store->spec(last).expert);
    }
    last = first - 1;
  }
  auto reduce = [store, buckets, expert, dp,
                 edp](size_t b) -> absl::StatusOr<std::unique_ptr<comm::CommRequest>> {
    comm::Communicator* group = expert[b] ? edp : dp;
    if (group == nullptr || group->size() == 1) {
      return comm::internal::CompletedRequest("expert grads (one rank)");
    }
    return group->AllReduceAsync(store->flat_grads().Slice(buckets[b].first, buckets[b].second),
                                 comm::ReduceOp::kSum);
  };
  return std::make_unique<GradReducer>(store, buckets, config.overlap_grad_reduce, reduce);
}

}  // namespace

absl::StatusOr<Optimizer> Optimizer::Create(nn::ParameterStore* store,
                                            const OptimizerConfig& config, comm::Communicator* dp,
                                            const ExpertGroups& experts) {
  RETURN_IF_ERROR(config.Validate());
  if (!store->masters_whole()) {
    return absl::FailedPreconditionError(
        "Optimizer::Create: the store's f32 masters are already sharded by another (distributed) "
        "optimizer");
  }
  Optimizer o;
  o.store_ = store;
  o.config_ = config;
  if (experts.ep != nullptr && experts.ep->size() > 1 && store->has_experts()) {
    if (dp == nullptr || experts.edp == nullptr) {
      return absl::InvalidArgumentError(
          "Optimizer::Create: expert parallelism needs the data-parallel and "
          "expert-data-parallel groups");
    }
    o.experts_ = experts;
  }
  int64_t moment_elements = store->NumLocalElements();
  if (config.use_distributed_optimizer && dp != nullptr && dp->size() > 1 &&
      o.experts_.ep != nullptr) {
    RETURN_IF_ERROR(o.CreateExpertStates(dp));
    moment_elements = o.dist_->shard_elements() + o.edist_->shard_elements();
  } else if (config.use_distributed_optimizer && dp != nullptr && dp->size() > 1) {
    ASSIGN_OR_RETURN(o.dist_,
                     DistributedOptimizerState::Create(store, config.dp_bucket_elements, dp));
    moment_elements = o.dist_->shard_elements();
    DistributedOptimizerState* dist = o.dist_.get();
    o.reducer_ = std::make_unique<GradReducer>(
        store, dist->layout().Ranges(), config.overlap_grad_reduce,
        [dist](size_t bucket) { return dist->ReduceScatterBucket(bucket); });
  } else if (o.experts_.ep != nullptr) {
    o.reducer_ = ExpertGradReducer(store, config, dp, o.experts_.edp);
  } else {
    o.reducer_ =
        std::make_unique<GradReducer>(store, config.dp_bucket_elements, config.overlap_grad_reduce);
  }
  // The moments live with the parameters (a GPU store: on its device).
  ExecContext on_device;
  on_device.device = store->device();
  // With bf16/f16 compute the distributed optimizer keeps the f32 masters sharded too; the whole
  // masters are released before the moments exist, which keeps them out of the peak.
  if (o.dist_ != nullptr && store->compute_dtype() != DType::kF32) {
    RETURN_IF_ERROR(o.dist_->ShardMasters(on_device, /*release=*/o.edist_ == nullptr));
    if (o.edist_ != nullptr) {
      RETURN_IF_ERROR(o.edist_->ShardMasters(on_device, /*release=*/false));
      RETURN_IF_ERROR(store->ReleaseMasters(on_device));
    }
  }
  ASSIGN_OR_RETURN(o.m_, AllocZeros(on_device, {moment_elements}, DType::kF32));
  ASSIGN_OR_RETURN(o.v_, AllocZeros(on_device, {moment_elements}, DType::kF32));
  return o;
}

absl::Status Optimizer::CreateExpertStates(comm::Communicator* dp) {
  // The flat buffer's runs of dense and of expert parameters.
  std::vector<std::pair<int64_t, int64_t>> dense, expert;
  for (int first = 0; first < store_->size();) {
    int last = first;
    while (last + 1 < store_->size() &&
           store_->spec(last + 1).expert == store_->spec(first).expert) {
      ++last;
    }
    const std::pair<int64_t, int64_t> run = {
        store_->offset(first), store_->offset(last) + NumElements(store_->local_shape(last))};
    (store_->spec(first).expert ? expert : dense).push_back(run);
    first = last + 1;
  }
  const int64_t bucket = config_.dp_bucket_elements;
  ASSIGN_OR_RETURN(dist_, DistributedOptimizerState::Create(store_, bucket, dp, dense));
  ASSIGN_OR_RETURN(edist_, DistributedOptimizerState::Create(store_, bucket, experts_.edp, expert));
  // One reducer over both states' buckets, from the end of the buffer (each bucket inside one
  // run), each reduce-scattered over its state's group.
  struct Bucket {
    int64_t begin, end;
    DistributedOptimizerState* state;
    size_t index;
  };
  std::vector<Bucket> buckets;
  for (DistributedOptimizerState* state : {dist_.get(), edist_.get()}) {
    for (size_t i = 0; i < state->layout().buckets.size(); ++i) {
      const ShardBucket& b = state->layout().buckets[i];
      buckets.push_back({b.begin, b.end, state, i});
    }
  }
  std::sort(buckets.begin(), buckets.end(),
            [](const Bucket& a, const Bucket& b) { return a.begin > b.begin; });
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Bucket& b : buckets) ranges.push_back({b.begin, b.end});
  reducer_ = std::make_unique<GradReducer>(
      store_, ranges, config_.overlap_grad_reduce,
      [buckets](size_t i) { return buckets[i].state->ReduceScatterBucket(buckets[i].index); });
  return absl::OkStatus();
}

TensorView Optimizer::DenseMoment(const Tensor& t) const {
  return t.view().Slice(0, dist_->shard_elements());
}

TensorView Optimizer::ExpertMoment(const Tensor& t) const {
  const int64_t begin = dist_->shard_elements();
  return t.view().Slice(begin, begin + edist_->shard_elements());
}

void Optimizer::set_pipeline(comm::Communicator* pp, int uncounted_handle,
                             comm::Communicator* embedding, int tied_handle) {
  pp_ = pp;
  uncounted_handle_ = uncounted_handle;
  embedding_ = embedding;
  tied_handle_ = tied_handle;
  if (dist_ != nullptr && tied_handle >= 0) {
    const int64_t begin = store_->offset(tied_handle);
    reducer_->Hold(begin, begin + NumElements(store_->local_shape(tied_handle)));
  }
}

absl::Status Optimizer::FinishGradReduce() {
  auto sum_tied_copies = [this]() -> absl::Status {
    if (!tied_pending_) return absl::OkStatus();
    tied_pending_ = false;
    if (embedding_ == nullptr || embedding_->size() == 1 || tied_handle_ < 0) {
      return absl::OkStatus();
    }
    return embedding_->AllReduce(store_->grad(tied_handle_), comm::ReduceOp::kSum);
  };
  auto sum_tied_timed = [&]() -> absl::Status {
    if (!tied_pending_ || embedding_ == nullptr || embedding_->size() == 1 || tied_handle_ < 0) {
      return sum_tied_copies();
    }
    nn::TimerScope timed(timers_, "embedding-grads-all-reduce");
    return sum_tied_copies();
  };
  const bool tied_first = dist_ != nullptr;
  if (tied_first) RETURN_IF_ERROR(sum_tied_timed());
  {
    nn::TimerScope timed(timers_, "all-grads-sync");
    RETURN_IF_ERROR(reducer_->Finish());
  }
  if (!tied_first) RETURN_IF_ERROR(sum_tied_timed());
  return absl::OkStatus();
}

absl::Status Optimizer::GatherStateToRoot(const ExecContext& ctx, const TensorView& values,
                                          const TensorView& exp_avg,
                                          const TensorView& exp_avg_sq) const {
  if (dist_ == nullptr) {
    return absl::FailedPreconditionError(
        "Optimizer::GatherStateToRoot: the optimizer is not distributed; read its live tensors");
  }
  if (edist_ != nullptr) {
    // The dense shards to DP rank 0, the experts' to rank 0 of each expert-data-parallel group.
    RETURN_IF_ERROR(dist_->GatherToRoot(ctx, DenseMoment(m_), exp_avg));
    RETURN_IF_ERROR(dist_->GatherToRoot(ctx, DenseMoment(v_), exp_avg_sq));
    RETURN_IF_ERROR(edist_->GatherToRoot(ctx, ExpertMoment(m_), exp_avg));
    RETURN_IF_ERROR(edist_->GatherToRoot(ctx, ExpertMoment(v_), exp_avg_sq));
  } else {
    RETURN_IF_ERROR(dist_->GatherToRoot(ctx, m_.view(), exp_avg));
    RETURN_IF_ERROR(dist_->GatherToRoot(ctx, v_.view(), exp_avg_sq));
  }
  if (dist_->masters_sharded()) {
    RETURN_IF_ERROR(dist_->GatherToRoot(ctx, dist_->master_shard(), values));
    if (edist_ != nullptr) {
      RETURN_IF_ERROR(edist_->GatherToRoot(ctx, edist_->master_shard(), values));
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::LoadMoments(const ExecContext& ctx, const TensorView& exp_avg,
                                    const TensorView& exp_avg_sq) {
  if (dist_ == nullptr) {
    RETURN_IF_ERROR(CopyTensor(ctx, exp_avg, m_.view()));
    return CopyTensor(ctx, exp_avg_sq, v_.view());
  }
  if (edist_ != nullptr) {
    RETURN_IF_ERROR(dist_->Scatter(ctx, exp_avg, DenseMoment(m_)));
    RETURN_IF_ERROR(dist_->Scatter(ctx, exp_avg_sq, DenseMoment(v_)));
    RETURN_IF_ERROR(edist_->Scatter(ctx, exp_avg, ExpertMoment(m_)));
    return edist_->Scatter(ctx, exp_avg_sq, ExpertMoment(v_));
  }
  RETURN_IF_ERROR(dist_->Scatter(ctx, exp_avg, m_.view()));
  return dist_->Scatter(ctx, exp_avg_sq, v_.view());
}

bool Optimizer::masters_sharded() const { return dist_ != nullptr && dist_->masters_sharded(); }

absl::Status Optimizer::GatherValues(const ExecContext& ctx, const TensorView& host_values) const {
  RETURN_IF_ERROR(store_->CheckHostFlat("Optimizer::GatherValues", host_values));
  if (!masters_sharded()) return CopyTensor(ctx, store_->flat_values(), host_values);
  RETURN_IF_ERROR(dist_->GatherToHost(ctx, dist_->master_shard(), host_values));
  if (edist_ == nullptr) return absl::OkStatus();
  return edist_->GatherToHost(ctx, edist_->master_shard(), host_values);
}

absl::Status Optimizer::LoadValues(const ExecContext& ctx, const TensorView& host_values) {
  if (!masters_sharded()) return store_->CopyValuesFromHost(ctx, host_values);
  RETURN_IF_ERROR(store_->SetComputeWeightsFromHost(ctx, host_values));
  if (edist_ != nullptr) RETURN_IF_ERROR(edist_->Scatter(ctx, host_values, edist_->master_shard()));
  return dist_->Scatter(ctx, host_values, dist_->master_shard());
}

TensorView Optimizer::exp_avg(int handle) const {
  CHECK(dist_ == nullptr) << "per-parameter moments of a distributed optimizer";
  return TensorView(m_.data_as<float>() + store_->offset(handle), store_->local_shape(handle),
                    DType::kF32, m_.device());
}

TensorView Optimizer::exp_avg_sq(int handle) const {
  CHECK(dist_ == nullptr) << "per-parameter moments of a distributed optimizer";
  return TensorView(v_.data_as<float>() + store_->offset(handle), store_->local_shape(handle),
                    DType::kF32, v_.device());
}

namespace {

// `x` summed over `group` in `reduce` (kI64 or kF32).
absl::StatusOr<double> SumOver(comm::Communicator* group, DType reduce, double x) {
  Tensor part = Tensor::Host({1}, reduce);
  if (reduce == DType::kI64) {
    part.data_as<int64_t>()[0] = static_cast<int64_t>(x);
  } else {
    part.data_as<float>()[0] = static_cast<float>(x);
  }
  RETURN_IF_ERROR(group->AllReduce(part.view(), comm::ReduceOp::kSum));
  return reduce == DType::kI64 ? static_cast<double>(part.data_as<int64_t>()[0])
                               : static_cast<double>(part.data_as<float>()[0]);
}

}  // namespace

absl::StatusOr<double> Optimizer::UniqueSum(
    comm::Communicator* tp, bool grads, DType reduce, CopySum copy,
    const std::function<absl::StatusOr<double>(const TensorView&)>& fn) const {
  const bool first_tp_rank = tp == nullptr || tp->rank() == 0;
  double local = 0, expert = 0;
  if (dist_ != nullptr) {
    // The shards summed over their groups: the dense ones over DP, an expert's over its
    // expert-data-parallel group (then the experts over EP, below).
    ASSIGN_OR_RETURN(local, dist_->OwnedSum(first_tp_rank, uncounted_handle_, copy, grads, fn));
    ASSIGN_OR_RETURN(local, SumOver(dist_->dp(), reduce, local));
    if (edist_ != nullptr) {
      ASSIGN_OR_RETURN(expert, edist_->OwnedSum(first_tp_rank, uncounted_handle_, copy, grads, fn));
      ASSIGN_OR_RETURN(expert, SumOver(edist_->dp(), reduce, expert));
    }
  } else {
    for (int i = 0; i < store_->size(); ++i) {
      if (store_->spec(i).split_dim < 0 && !first_tp_rank) continue;  // Counted on TP rank 0.
      if (i == uncounted_handle_ && copy == CopySum::kLeaveOut) continue;
      ASSIGN_OR_RETURN(double s, fn(grads ? store_->grad(i) : store_->value(i)));
      const double counted = (i != uncounted_handle_ || !std::isfinite(s)) ? s : 0.0;
      (experts_.ep != nullptr && store_->spec(i).expert ? expert : local) += counted;
    }
  }
  if (experts_.ep != nullptr) {
    // Each rank of the EP group holds other experts: theirs summed once (not over the DP group).
    ASSIGN_OR_RETURN(const double all, SumOver(experts_.ep, reduce, expert));
    local += all;
  }
  const bool over_tp = tp != nullptr && tp->size() > 1, over_pp = pp_ != nullptr && pp_->size() > 1;
  if (!over_tp && !over_pp) return local;
  // The communicator reduces f32 or i64: a summed square norm is exact to f32 rounding, which is
  // ample for clipping and logging. A distributed optimizer's shards were summed over DP first; a
  // non-finite element anywhere makes every rank's sum non-finite, so all skip the step.
  Tensor part = Tensor::Host({1}, reduce);
  if (reduce == DType::kI64) {
    part.data_as<int64_t>()[0] = static_cast<int64_t>(local);
  } else {
    part.data_as<float>()[0] = static_cast<float>(local);
  }
  if (over_tp) RETURN_IF_ERROR(tp->AllReduce(part.view(), comm::ReduceOp::kSum));
  if (over_pp) RETURN_IF_ERROR(pp_->AllReduce(part.view(), comm::ReduceOp::kSum));
  return reduce == DType::kI64 ? static_cast<double>(part.data_as<int64_t>()[0])
                               : static_cast<double>(part.data_as<float>()[0]);
}

namespace {

// The elements of an f32 tensor (on any device) that are exactly zero.
absl::StatusOr<double> CountZeros(const ExecContext& ctx, const TensorView& t, HostStaging* host) {
  ASSIGN_OR_RETURN(const TensorView h, host->Download(ctx, t));
  const float* p = h.data_as<float>();
  int64_t zeros = 0;
  for (int64_t i = 0; i < h.numel(); ++i) zeros += p[i] == 0.0f;
  return static_cast<double>(zeros);
}

}  // namespace

absl::Status Optimizer::Update(const ExecContext& ctx, const ops::AdamArgs& args) {
  if (dist_ != nullptr) {
    if (edist_ != nullptr) {
      RETURN_IF_ERROR(dist_->Update(ctx, args, DenseMoment(m_), DenseMoment(v_)));
      RETURN_IF_ERROR(edist_->Update(ctx, args, ExpertMoment(m_), ExpertMoment(v_)));
    } else {
      RETURN_IF_ERROR(dist_->Update(ctx, args, m_.view(), v_.view()));
    }
    nn::TimerScope timed(timers_, "params-all-gather");
    RETURN_IF_ERROR(dist_->GatherWeights(ctx));
    if (edist_ != nullptr) RETURN_IF_ERROR(edist_->GatherWeights(ctx));
    if (embedding_ != nullptr && embedding_->size() > 1 && tied_handle_ >= 0) {
      // Sharded masters: the weights the last stage computes with; its own master shard of the
      // copy is then not the model's (the first stage's is, which checkpoints load).
      const bool whole = !dist_->masters_sharded() || store_->spec(tied_handle_).f32_compute;
      RETURN_IF_ERROR(embedding_->Broadcast(
          whole ? store_->value(tied_handle_) : store_->compute_value(tied_handle_), /*root=*/0));
    }
    return absl::OkStatus();
  }
  // Whole masters: each parameter's compute copy is rounded as its update ends (Step does not
  // refresh them again).
  const bool copies = store_->compute_dtype() != DType::kF32;
  for (int i = 0; i < store_->size(); ++i) {
    ops::AdamArgs a = args;
    if (!store_->spec(i).weight_decay) a.weight_decay = 0.0f;
    RETURN_IF_ERROR(copies ? ops::AdamUpdateAndRound(ctx, store_->value(i), store_->grad(i),
                                                     exp_avg(i), exp_avg_sq(i), a,
                                                     store_->compute_value(i))
                           : ops::AdamUpdate(ctx, store_->value(i), store_->grad(i), exp_avg(i),
                                             exp_avg_sq(i), a));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepStats> Optimizer::Step(const ExecContext& ctx, comm::Communicator* tp,
                                          comm::Communicator* dp, double lr, double grad_divisor) {
  if (!(grad_divisor > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("grad_divisor must be > 0, got ", grad_divisor));
  }
  if (dist_ != nullptr && dp != dist_->dp()) {
    return absl::InvalidArgumentError(
        "Optimizer::Step: a distributed optimizer steps over the data-parallel communicator it "
        "was created with");
  }
  if (!reduce_begun_) (void)BeginGradReduce(dp);
  reduce_begun_ = false;
  RETURN_IF_ERROR(FinishGradReduce());
  StepStats stats;
  // The gradients are the sums over the micro-batches (and the loss scale's multiple): the norm
  // and the update take them divided by grad_divisor, which the update folds into its gradient
  // scale rather than a pass over every gradient.
  const double inverse_divisor = 1.0 / grad_divisor;
  {
    nn::TimerScope timed(timers_, "optimizer-clip-main-grad");
    ASSIGN_OR_RETURN(const double norm_sq,
                     UniqueSum(tp, /*grads=*/true, DType::kF32, CopySum::kOnlyNonfinite,
                               [&](const TensorView& g) { return ops::SumOfSquares(ctx, g); }));
    stats.grad_norm = std::sqrt(norm_sq) * inverse_divisor;
  }
  if (config_.log_num_zeros_in_grad) {
    nn::TimerScope timed(timers_, "optimizer-count-zeros");
    HostStaging host;
    ASSIGN_OR_RETURN(const double zeros,
                     UniqueSum(tp, /*grads=*/true, DType::kI64, CopySum::kLeaveOut,
                               [&](const TensorView& g) { return CountZeros(ctx, g, &host); }));
    stats.num_zeros = static_cast<int64_t>(zeros);
  }
  if (!std::isfinite(stats.grad_norm)) {
    stats.skipped = true;
    return stats;
  }
  float clip = 1.0f;
  if (config_.clip_grad > 0) {
    const double coeff = config_.clip_grad / (stats.grad_norm + 1e-6);
    if (coeff < 1.0) clip = static_cast<float>(coeff);
  }
  ++step_;
  ops::AdamArgs a;
  a.lr = static_cast<float>(lr);
  a.beta1 = config_.beta1;
  a.beta2 = config_.beta2;
  a.eps = config_.eps;
  a.weight_decay = config_.weight_decay;
  a.mode = ops::WeightDecayMode::kAdamW;
  a.step = step_;
  a.grad_scale = static_cast<float>(clip * inverse_divisor);
  if (before_update_) before_update_();
  {
    nn::TimerScope timed(timers_, "optimizer-inner-step");
    RETURN_IF_ERROR(Update(ctx, a));
  }
  // The modules compute with the compute-dtype copies: round the new masters into them (without
  // a distributed optimizer, or with sharded masters, Update has set them).
  if (dist_ != nullptr && !masters_sharded()) {
    nn::TimerScope timed(timers_, "optimizer-copy-main-to-model-params");
    RETURN_IF_ERROR(store_->RefreshComputeWeights(ctx));
  }
  if (config_.log_params_norm) {
    ASSIGN_OR_RETURN(const double sq,
                     UniqueSum(tp, /*grads=*/false, DType::kF32, CopySum::kLeaveOut,
                               [&](const TensorView& w) { return ops::SumOfSquares(ctx, w); }));
    stats.params_norm = std::sqrt(sq);
  }
  return stats;
}

}  // namespace train
}  // namespace mt
