// The Trainer's pipeline-parallel parts (PP > 1): the runner of the schedule, the reductions over
// the pipeline and embedding groups, and evaluation through the stages.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "train/trainer.h"

namespace mt {
namespace train {

absl::Status Trainer::SetUpPipeline() {
  comm::ParallelContext& pc = *parts_.parallel;
  std::vector<models::Model*> chunks = parts_.chunks;
  if (chunks.empty()) chunks.push_back(parts_.model);
  comm::PipelineSplit split;
  split.num_layers = parts_.model->config().num_layers;
  split.stages = pc.pp_size();
  split.virtual_stages = static_cast<int>(chunks.size());
  ASSIGN_OR_RETURN(pipeline_,
                   PipelineRunner::Create(&pc.pp(), split, chunks, parts_.exec,
                                          parts_.store->compute_dtype(), parts_.more_chunks));
  tied_handle_ = pipeline_->tied_embedding_handle();
  // The first stage counts the tied embedding in the gradient norm; the last stage's copy (the
  // same values after Optimizer::FinishGradReduce sums them) is left out. A distributed optimizer
  // then gives the last stage the first stage's updated weights (see Optimizer::set_pipeline;
  // with sharded masters only the compute copy: the last stage's own master shard of it is not
  // read).
  parts_.optimizer->set_pipeline(&pc.pp(), pc.is_first_stage() ? -1 : tied_handle_, &pc.embedding(),
                                 tied_handle_);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<OwnedBatch>> Trainer::TakeBatches(BatchStream& data, int64_t n,
                                                             bool partial) {
  std::vector<OwnedBatch> out;
  for (int64_t i = 0; i < n; ++i) {
    std::optional<models::Batch> batch;
    {
      nn::TimerScope timed(timers_.get(), "batch-generator");
      batch = data.Next();
    }
    if (!batch && partial) break;
    if (!batch) {
      return absl::OutOfRangeError(absl::StrFormat(
          "training data exhausted at iteration %d; build the dataset with more samples",
          iteration_));
    }
    ASSIGN_OR_RETURN(OwnedBatch owned, CopyBatch(*parts_.exec, *batch));
    out.push_back(std::move(owned));
  }
  return out;
}

absl::StatusOr<Trainer::Accumulated> Trainer::AccumulatePipelined(BatchStream& data) {
  comm::Communicator* dp = GradGroup(*parts_.parallel);
  // Each chunk's backward of the last micro-batch is its last one: from there on it reports its
  // finished gradients, so their DP reduction overlaps the rest of the schedule. The chunks
  // declared their parameters in chunk order and finish in reverse chunk order, as the buckets
  // are taken (train/grad_reducer.h).
  nn::GradReadyListener* listener = parts_.optimizer->BeginGradReduce(dp);
  const int64_t m = data.accumulation_steps();
  ASSIGN_OR_RETURN(const std::vector<OwnedBatch> owned, TakeBatches(data, m, /*partial=*/false));
  std::vector<models::Batch> batches;
  for (const OwnedBatch& b : owned) batches.push_back(b.view());
  Accumulated r;
  auto step = [this, listener, m](int micro) {
    nn::StepContext sc = MicroStep(micro);
    if (micro == m - 1) sc.grads_ready = listener;
    return sc;
  };
  ASSIGN_OR_RETURN(r.loss, pipeline_->Run(batches, step, models::Backward::kYes,
                                          parts_.scaler->scale(), &r.flops));
  r.loss.total /= m;
  for (double& p : r.loss.parts) p /= m;
  const PipelineStats& st = pipeline_->stats();
  ++pipeline_totals_.iterations;
  pipeline_totals_.seconds += st.seconds;
  pipeline_totals_.wait_seconds += st.wait_seconds;
  pipeline_totals_.recomputed += st.recomputed;
  pipeline_totals_.instances = st.instances;
  return r;
}

absl::StatusOr<std::pair<models::Losses, int>> Trainer::PipelinedEvalSums(BatchStream& valid) {
  ASSIGN_OR_RETURN(const std::vector<OwnedBatch> owned,
                   TakeBatches(valid, config_.eval_iters, /*partial=*/true));
  std::vector<models::Batch> batches;
  for (const OwnedBatch& b : owned) batches.push_back(b.view());
  // Every stage has read the same number of micro-batches (the same data on every stage).
  if (batches.empty()) return std::make_pair(models::Losses(), 0);
  nn::StepContext sc = nn::StepContext::Eval(parts_.exec, parts_.parallel->tp_or_null());
  sc.cp = parts_.parallel->cp_or_null();
  ASSIGN_OR_RETURN(models::Losses sums,
                   pipeline_->Run(
                       batches, [&sc](int) { return sc; }, models::Backward::kNo, 1.0, nullptr));
  return std::make_pair(sums, static_cast<int>(batches.size()));
}

absl::Status Trainer::PpSum(models::Losses* losses, double* flops) {
  if (pipeline_ == nullptr) return absl::OkStatus();
  // One exact i64 sum: the last stage contributes the bit patterns of its f64 losses (the others
  // zeros, so the sum is those bits), every stage its FLOPs rounded to an integer. A model whose
  // stages report parts of their own (Model::output_stage_parts) adds a slot per stage: its total
  // and those parts, as bit patterns, added up here in stage order (the same sum on every rank).
  comm::ParallelContext& pc = *parts_.parallel;
  const size_t parts = losses->parts.size();
  const size_t first = std::min(parts, static_cast<size_t>(std::max(0, output_stage_parts_)));
  const size_t n = first < parts ? 1 + parts - first : 0;  // One stage's slot.
  const int stages = pc.pp().size();
  std::vector<double> mine = {losses->total};
  mine.insert(mine.end(), losses->parts.begin(), losses->parts.end());
  const size_t size = parts + 2 + n * stages;
  Tensor t = Tensor::Host({static_cast<int64_t>(size)}, DType::kI64);
  int64_t* v = t.data_as<int64_t>();
  std::memset(v, 0, size * sizeof(int64_t));
  if (pc.is_last_stage()) std::memcpy(v, mine.data(), (parts + 1) * sizeof(double));
  v[parts + 1] = static_cast<int64_t>(std::llround(*flops));
  int64_t* slots = v + parts + 2;
  if (n > 0) {
    std::vector<double> own = {mine[0]};
    own.insert(own.end(), mine.begin() + 1 + first, mine.end());
    std::memcpy(slots + n * pc.pp().rank(), own.data(), n * sizeof(double));
  }
  RETURN_IF_ERROR(pc.pp().AllReduce(t.view(), comm::ReduceOp::kSum));
  std::memcpy(mine.data(), v, (parts + 1) * sizeof(double));
  if (n > 0) {
    std::vector<double> sum(n, 0.0), theirs(n);
    for (int s = 0; s < stages; ++s) {
      std::memcpy(theirs.data(), slots + n * s, n * sizeof(double));
      for (size_t k = 0; k < n; ++k) sum[k] += theirs[k];
    }
    mine[0] = sum[0];
    for (size_t k = first; k < parts; ++k) mine[1 + k] = sum[1 + k - first];
  }
  losses->total = mine[0];
  for (size_t k = 0; k < parts; ++k) losses->parts[k] = mine[1 + k];
  *flops = static_cast<double>(v[parts + 1]);
  return absl::OkStatus();
}

}  // namespace train
}  // namespace mt
