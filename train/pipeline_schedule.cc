#include "train/pipeline_schedule.h"

#include <algorithm>
#include <chrono>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/status.h"
#include "models/registry.h"
#include "models/stages.h"

namespace mt {
namespace train {

namespace {

using Kind = PipelineOp::Kind;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

absl::StatusOr<SimulatedPipeline> SimulatePipeline(int stages, int chunks, int micro_batches,
                                                   double tf, double tb) {
  std::vector<std::vector<PipelineOp>> ops(stages);
  for (int s = 0; s < stages; ++s) {
    ASSIGN_OR_RETURN(ops[s], PipelineScheduleOps(stages, s, chunks, micro_batches));
  }
  // Finish time of (kind, micro, virtual stage).
  std::map<std::tuple<int, int, int>, double> done;
  std::vector<size_t> next(stages, 0);
  std::vector<double> free(stages, 0.0), busy(stages, 0.0);
  const int last = stages * chunks - 1;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < ops[s].size()) {
        const PipelineOp& op = ops[s][next[s]];
        const int v = op.chunk * stages + s;
        const bool fwd = op.kind == Kind::kForward;
        // The input: the previous virtual stage's forward, the next one's backward (and this
        // virtual stage's own forward).
        double ready = 0;
        std::vector<std::tuple<int, int, int>> deps;
        if (fwd && v > 0) deps.emplace_back(0, op.micro, v - 1);
        if (!fwd && v < last) deps.emplace_back(1, op.micro, v + 1);
        if (!fwd) deps.emplace_back(0, op.micro, v);
        bool blocked = false;
        for (const auto& d : deps) {
          auto it = done.find(d);
          if (it == done.end()) {
            blocked = true;
            break;
          }
          ready = std::max(ready, it->second);
        }
        if (blocked) break;
        const double cost = fwd ? tf : tb;
        free[s] = std::max(free[s], ready) + cost;
        busy[s] += cost;
        done[{fwd ? 0 : 1, op.micro, v}] = free[s];
        ++next[s];
        progress = true;
      }
    }
  }
  SimulatedPipeline sim;
  for (int s = 0; s < stages; ++s) {
    if (next[s] != ops[s].size()) {
      return absl::InternalError(absl::StrCat("pipeline schedule: stage ", s, " is stuck at ",
                                              OpName(ops[s][next[s]]), " (a deadlock)"));
    }
    sim.makespan = std::max(sim.makespan, free[s]);
  }
  for (int s = 0; s < stages; ++s) sim.idle_fraction.push_back(1.0 - busy[s] / sim.makespan);
  return sim;
}

absl::StatusOr<ChunkFactory> StageChunkFactory(const models::ModelConfig& config,
                                               nn::ParameterStore* store,
                                               const models::ModelOptions& options,
                                               const comm::PipelineSplit& split, int stage) {
  // Where each chunk's declarations start: the stage declared again in a store that allocates
  // nothing.
  nn::ParameterStore scratch(store->tp_rank(), store->tp_size(), store->compute_dtype());
  std::vector<int> first;
  for (int v = 0; v < split.virtual_stages; ++v) {
    first.push_back(scratch.size());
    RETURN_IF_ERROR(
        models::CreateModel(config, &scratch, models::StageChunkOptions(options, split, stage, v))
            .status());
  }
  // Refused here, on every stage alike, rather than by the first Mirror in the middle of a
  // schedule, where the other stages would wait for this one forever.
  bool same = scratch.size() == store->size();
  for (int i = 0; same && i < scratch.size(); ++i) {
    same = nn::SameDeclaration(scratch.spec(i), store->spec(i));
  }
  if (!same) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StageChunkFactory: the store's ", store->size(), " parameters are not those of stage ",
        stage, "'s ", split.virtual_stages, " chunks (", scratch.size(), " parameters)"));
  }
  return [=](int chunk) -> absl::StatusOr<ChunkInstance> {
    if (chunk < 0 || chunk >= split.virtual_stages) {
      return absl::InvalidArgumentError(
          absl::StrCat("no model chunk ", chunk, " on a stage of ", split.virtual_stages));
    }
    ChunkInstance instance;
    ASSIGN_OR_RETURN(instance.store, nn::ParameterStore::Mirror(store, first[chunk]));
    ASSIGN_OR_RETURN(instance.model,
                     models::CreateModel(config, instance.store.get(),
                                         models::StageChunkOptions(options, split, stage, chunk)));
    return instance;
  };
}

models::Batch OwnedBatch::view() const {
  models::Batch b;
  b.tokens = tokens.view();
  b.labels = labels.view();
  b.token_types = token_types.view();
  b.padding_mask = padding_mask.view();
  b.sop_labels = sop_labels.view();
  return b;
}

absl::StatusOr<OwnedBatch> CopyBatch(const ExecContext& ec, const models::Batch& batch) {
  OwnedBatch o;
  const std::pair<const TensorView*, Tensor*> fields[] = {{&batch.tokens, &o.tokens},
                                                          {&batch.labels, &o.labels},
                                                          {&batch.token_types, &o.token_types},
                                                          {&batch.padding_mask, &o.padding_mask},
                                                          {&batch.sop_labels, &o.sop_labels}};
  for (const auto& [from, to] : fields) {
    if (from->data == nullptr) continue;
    ASSIGN_OR_RETURN(*to, CopyToHost(ec, *from));
  }
  return o;
}

absl::StatusOr<std::unique_ptr<PipelineRunner>> PipelineRunner::Create(
    comm::Communicator* pp, const comm::PipelineSplit& split, std::vector<models::Model*> chunks,
    const ExecContext* exec, DType dtype, ChunkFactory more) {
  if (pp == nullptr || pp->size() != split.stages ||
      static_cast<int>(chunks.size()) != split.virtual_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("PipelineRunner: ", chunks.size(), " model chunks over a pipeline of ",
                     pp == nullptr ? 0 : pp->size(), " ranks do not match the split's ",
                     split.stages, " stages of ", split.virtual_stages, " chunks"));
  }
  if (split.stages > 1 && !pp->nonblocking_point_to_point()) {
    return absl::UnimplementedError(
        absl::StrCat("pipeline parallelism needs non-blocking point-to-point messages, which the ",
                     pp->backend(), " communicator lacks; use --comm_backend=mpi"));
  }
  std::unique_ptr<PipelineRunner> r(new PipelineRunner());
  r->pp_ = pp;
  r->split_ = split;
  for (models::Model* chunk : chunks) {
    ASSIGN_OR_RETURN(models::PipelineStage * stage, models::PipelineStageOf(*chunk));
    r->instances_.push_back({Instance{chunk, stage, -1}});
  }
  r->more_ = std::move(more);
  r->exec_ = exec;
  r->dtype_ = dtype;
  r->stage_ = pp->rank();
  return r;
}

int PipelineRunner::tied_embedding_handle() const {
  int handle = -1;
  for (const std::vector<Instance>& all : instances_) {
    const int h = all.front().stage->tied_embedding_handle();
    if (h >= 0) handle = h;
  }
  return handle;
}

absl::StatusOr<PipelineRunner::Instance*> PipelineRunner::FreeInstance(int c) {
  std::vector<Instance>& all = instances_[c];
  for (Instance& in : all) {
    if (in.micro < 0) return &in;
  }
  if (!more_) return &all.front();  // Its micro-batch will be recomputed.
  ASSIGN_OR_RETURN(ChunkInstance created, more_(c));
  ASSIGN_OR_RETURN(models::PipelineStage * stage, models::PipelineStageOf(*created.model));
  all.push_back(Instance{created.model.get(), stage, -1});
  created_.push_back(std::move(created));
  return &all.back();
}

absl::StatusOr<Tensor> PipelineRunner::Boundary(const models::Batch& batch) const {
  return Alloc(*exec_,
               instances_[0][0].stage->StageBoundaryShape(batch.tokens.dim(0), batch.tokens.dim(1)),
               dtype_);
}

// Tags: activations entering virtual stage v travel with tag 2v, their gradients leaving it
// (towards v - 1) with tag 2(v - 1) + 1, so the messages of different chunks never match each
// other; within one tag, micro-batches go in order on both sides.
absl::StatusOr<Tensor> PipelineRunner::Receive(const models::Batch& batch, int peer, int tag) {
  ASSIGN_OR_RETURN(Tensor t, Boundary(batch));
  ASSIGN_OR_RETURN(std::unique_ptr<comm::CommRequest> request, pp_->RecvAsync(t.view(), peer, tag));
  const auto start = Clock::now();
  RETURN_IF_ERROR(request->Wait());
  stats_.wait_seconds += SecondsSince(start);
  return t;
}

absl::Status PipelineRunner::Send(Tensor t, int peer, int tag) {
  ASSIGN_OR_RETURN(std::unique_ptr<comm::CommRequest> request, pp_->SendAsync(t.view(), peer, tag));
  sends_.emplace_back(std::move(request), std::move(t));
  return absl::OkStatus();
}

absl::Status PipelineRunner::ReapSends(bool all) {
  for (auto& send : sends_) {
    if (all) {
      RETURN_IF_ERROR(send.first->Wait());
    } else {
      RETURN_IF_ERROR(send.first->Test().status());
    }
  }
  sends_.erase(
      std::remove_if(sends_.begin(), sends_.end(), [](const auto& s) { return s.first->done(); }),
      sends_.end());
  return absl::OkStatus();
}

absl::StatusOr<models::Losses> PipelineRunner::Forward(const PipelineOp& op,
                                                       const models::Batch& batch,
                                                       const nn::StepContext& sc) {
  const int P = split_.stages, s = stage_, c = op.chunk, v = c * P + s;
  TensorView input;
  if (!split_.HoldsInput(s, c)) {
    nn::TimerScope timed(sc.timers, "forward-recv");
    ASSIGN_OR_RETURN(Tensor in, Receive(batch, (s + P - 1) % P, 2 * v));
    input = (inputs_[{c, op.micro}] = std::move(in)).view();
  }
  Tensor out;
  const bool sends = !split_.HoldsOutput(s, c);
  if (sends) {
    ASSIGN_OR_RETURN(out, Boundary(batch));
  }
  ASSIGN_OR_RETURN(Instance * instance, FreeInstance(c));
  models::Losses l;
  {
    nn::TimerScope timed(sc.timers, "forward-compute");
    ASSIGN_OR_RETURN(l, instance->stage->StageForward(sc, batch, input, out.view()));
  }
  instance->micro = op.micro;
  if (sends) {
    nn::TimerScope timed(sc.timers, "forward-send");
    RETURN_IF_ERROR(Send(std::move(out), (s + 1) % P, 2 * (v + 1)));
  }
  return l;
}

absl::Status PipelineRunner::Backward(const PipelineOp& op, const models::Batch& batch,
                                      const nn::StepContext& sc, double loss_scale) {
  const int P = split_.stages, s = stage_, c = op.chunk, v = c * P + s;
  const bool holds_input = split_.HoldsInput(s, c), holds_output = split_.HoldsOutput(s, c);
  Tensor out_grad;
  if (!holds_output) {
    nn::TimerScope timed(sc.timers, "backward-recv");
    ASSIGN_OR_RETURN(out_grad, Receive(batch, (s + 1) % P, 2 * v + 1));
  }
  auto stashed = inputs_.find({c, op.micro});
  const TensorView input = stashed == inputs_.end() ? TensorView() : stashed->second.view();
  Instance* instance = nullptr;
  for (Instance& in : instances_[c]) {
    if (in.micro == op.micro) instance = &in;
  }
  Tensor in_grad;
  {
    nn::TimerScope timed(sc.timers, "backward-compute");
    if (instance == nullptr) {  // Overwritten by a later forward: recompute the activations.
      ASSIGN_OR_RETURN(instance, FreeInstance(c));
      Tensor scratch;
      if (!holds_output) {
        ASSIGN_OR_RETURN(scratch, Boundary(batch));
      }
      RETURN_IF_ERROR(instance->stage->StageForward(sc, batch, input, scratch.view()).status());
      ++stats_.recomputed;
    }
    if (!holds_input) {
      ASSIGN_OR_RETURN(in_grad, Boundary(batch));
    }
    RETURN_IF_ERROR(
        instance->stage->StageBackward(sc, out_grad.view(), in_grad.view(), loss_scale));
  }
  instance->micro = -1;  // Backward consumed the activations.
  if (stashed != inputs_.end()) inputs_.erase(stashed);
  if (!holds_input) {
    nn::TimerScope timed(sc.timers, "backward-send");
    RETURN_IF_ERROR(Send(std::move(in_grad), (s + P - 1) % P, 2 * (v - 1) + 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<models::Losses> PipelineRunner::Run(const std::vector<models::Batch>& batches,
                                                   const std::function<nn::StepContext(int)>& step,
                                                   models::Backward backward, double loss_scale,
                                                   double* flops) {
  const auto start = Clock::now();
  stats_ = PipelineStats();
  inputs_.clear();  // A Run that failed may have left micro-batches in flight.
  for (std::vector<Instance>& all : instances_) {
    for (Instance& in : all) in.micro = -1;
  }
  const int m = static_cast<int>(batches.size()), V = split_.virtual_stages;
  std::vector<PipelineOp> ops;
  if (backward == models::Backward::kYes) {
    ASSIGN_OR_RETURN(ops, PipelineScheduleOps(split_.stages, stage_, V, m));
  } else {
    RETURN_IF_ERROR(comm::CheckPipelineSchedule(split_.stages, stage_, 1, m));
    for (int i = 0; i < m; ++i) {
      for (int c = 0; c < V; ++c) ops.push_back(PipelineOp{Kind::kForward, i, c});
    }
  }
  models::Losses sum;
  sum.parts.assign(instances_[0][0].model->loss_names().size(), 0.0);
  for (const PipelineOp& op : ops) {
    const models::Batch& batch = batches[op.micro];
    const nn::StepContext sc = step(op.micro);
    if (op.kind == Kind::kBackward) {
      RETURN_IF_ERROR(Backward(op, batch, sc, loss_scale));
    } else {
      ASSIGN_OR_RETURN(models::Losses l, Forward(op, batch, sc));
      if (backward == models::Backward::kNo) {
        inputs_.erase({op.chunk, op.micro});
        for (Instance& in : instances_[op.chunk]) {
          if (in.micro == op.micro) in.micro = -1;
        }
      }
      sum.total += l.total;
      sum.scored += l.scored;
      for (size_t k = 0; k < l.parts.size() && k < sum.parts.size(); ++k)
        sum.parts[k] += l.parts[k];
      if (flops != nullptr) {
        *flops += instances_[op.chunk][0].model->TrainingFlops(batch.tokens.dim(0),
                                                               batch.tokens.dim(1), l.scored);
      }
    }
    RETURN_IF_ERROR(ReapSends(/*all=*/false));
  }
  RETURN_IF_ERROR(ReapSends(/*all=*/true));
  inputs_.clear();
  for (const std::vector<Instance>& all : instances_) {
    stats_.instances += static_cast<int64_t>(all.size());
  }
  stats_.seconds = SecondsSince(start);
  return sum;
}

}  // namespace train
}  // namespace mt
