// Pipeline-parallel schedules (Narayanan et al. 2021): which forward and backward passes a stage
// runs in which order, a simulator of their timing, and the runner that executes them on one rank
// of a pipeline with its model chunks (models::Model::StageForward / StageBackward), exchanging
// activations and their gradients with the neighbouring stages.
//
// Stages and chunks (comm::PipelineSplit): P stages (the ranks of the pipeline communicator), V
// model chunks per stage; virtual stage v * P + s is chunk v of stage s, and a micro-batch flows
// through virtual stages 0, 1, ..., P * V - 1. V = 1 is the plain 1F1B schedule.
//
// 1F1B (V = 1), stage s of P over m micro-batches: w = min(P - s - 1, m) warm-up forwards, then
// m - w steady steps of one forward and one backward, then w cool-down backwards: at most P - s
// micro-batches are in flight on stage s. With forward time tf and backward time tb per stage, the
// pipeline bubble (each stage's idle fraction of the iteration) is (P - 1) / (m + P - 1).
// Interleaved (V > 1, m a multiple of P): micro-batches enter in groups of P, each group running
// through chunk 0 then chunk 1 ... of the stage; warm-up (P - s - 1) * 2 + (V - 1) * P forwards,
// then 1F1B steps, then the cool-down: the bubble shrinks to (P - 1) / (V * m + P - 1).
//
// Activations in flight: a model chunk keeps the activations of its latest StageForward only. The
// runner keeps every in-flight micro-batch's stage INPUT and, before the backward of a micro-batch
// that was not the chunk's latest forward, runs its forward again (same StepContext, so the same
// dropout masks and bit-identical activations): activation checkpointing at the stage boundary.
// With 1F1B the last stage never recomputes (its backward directly follows its forward); the
// other stages run one extra forward per micro-batch.
#ifndef MT_TRAIN_PIPELINE_SCHEDULE_H_
#define MT_TRAIN_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/parallel_context.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "models/model.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace train {

struct PipelineOp {
  enum class Kind { kForward, kBackward };
  Kind kind = Kind::kForward;
  int micro = 0;  // Micro-batch, in [0, m).
  int chunk = 0;  // Model chunk of this stage, in [0, V).
  friend bool operator==(const PipelineOp& a, const PipelineOp& b) {
    return a.kind == b.kind && a.micro == b.micro && a.chunk == b.chunk;
  }
};
// "F3" / "B0" (chunk 0), "F3.1" (chunk 1): for messages and tests.
std::string OpName(const PipelineOp& op);

// The ops of stage `stage` of `stages` with `chunks` model chunks per stage over `micro_batches`
// (see the file comment). InvalidArgument unless stages >= 1, 0 <= stage < stages, chunks >= 1,
// micro_batches >= 1, and, for chunks > 1, stages >= 2 and micro_batches a multiple of stages (the
// message names the flags).
absl::StatusOr<std::vector<PipelineOp>> PipelineScheduleOps(int stages, int stage, int chunks,
                                                            int micro_batches);

// Every stage's schedule run with forwards taking tf and backwards tb per virtual stage and free
// messages: each op starts when its stage is free and its input (the previous virtual stage's
// forward, the next one's backward) is done. Internal if the schedules deadlock or break a
// dependency; the errors of PipelineScheduleOps.
struct SimulatedPipeline {
  double makespan = 0;                // When the last op ends.
  std::vector<double> idle_fraction;  // Per stage: 1 - busy / makespan.
};
absl::StatusOr<SimulatedPipeline> SimulatePipeline(int stages, int chunks, int micro_batches,
                                                   double tf, double tb);

// This stage's model chunks in `store` (chunk v: the layers comm::PipelineSplit gives (stage, v),
// the input embedding and output head where it says), created through the registry with
// `options` (whose stage is replaced). The errors of models::CreateModel.
absl::StatusOr<std::vector<std::unique_ptr<models::Model>>> CreateStageModels(
    const models::ModelConfig& config, nn::ParameterStore* store,
    const models::ModelOptions& options, const comm::PipelineSplit& split, int stage);

// The names of the parameters each pipeline stage's store holds under `split` (split.stages
// lists, every chunk of a stage in one), from stage models declared in a store of TP degree
// tp_size (nothing is allocated): where a checkpoint's tensors go in that layout. The errors of
// CreateStageModels.
absl::StatusOr<std::vector<std::vector<std::string>>> StageParameterNames(
    const models::ModelConfig& config, int tp_size, const comm::PipelineSplit& split);

// A micro-batch copied to host tensors of its own (a BatchStream's views last one call only).
struct OwnedBatch {
  Tensor tokens, labels, token_types, padding_mask, sop_labels;
  models::Batch view() const;
};
// Errors: those of copying from the views' device.
absl::StatusOr<OwnedBatch> CopyBatch(const ExecContext& ec, const models::Batch& batch);

// What one Run() did on this rank.
struct PipelineStats {
  double seconds = 0;       // Run()'s wall time.
  double wait_seconds = 0;  // Blocked waiting for activations or gradients from other stages.
  int64_t recomputed = 0;   // Forwards run again before a backward (see the file comment).
};

// Executes the schedules on one rank. Not thread-safe; one Run() at a time.
class PipelineRunner {
 public:
  // `pp`: the pipeline communicator (rank = stage); `split`: its stages and chunks; `chunks`: this
  // stage's models, chunk v built with comm::PipelineSplit's layers of (pp->rank(), v) (not owned,
  // outlive the runner); activations of the chunks' StageBoundaryShape in `dtype` on exec's
  // device. InvalidArgument
  // unless chunks.size() == split.virtual_stages and pp->size() == split.stages; Unimplemented for
  // P > 1 over a communicator without non-blocking point-to-point (NCCL: use --comm_backend=mpi).
  static absl::StatusOr<std::unique_ptr<PipelineRunner>> Create(comm::Communicator* pp,
                                                                const comm::PipelineSplit& split,
                                                                std::vector<models::Model*> chunks,
                                                                const ExecContext* exec,
                                                                DType dtype);

  // One iteration on micro-batches `batches` (each stage is given all of them; step(i) is the
  // StepContext of micro-batch i, the same on every stage): with Backward::kYes the schedule's
  // forwards and backwards (gradients ACCUMULATED into the chunks' stores, the loss scaled by
  // loss_scale), with kNo the forwards only, in micro-batch order. Returns the SUM over the
  // micro-batches of the losses on the stage that holds the output, Losses with zero parts (as
  // many as loss_names) elsewhere; `flops` gets this rank's chunks' TrainingFlops. Errors: the
  // models' and the communicator's; InvalidArgument for an empty `batches` or one that breaks
  // PipelineScheduleOps' conditions.
  absl::StatusOr<models::Losses> Run(const std::vector<models::Batch>& batches,
                                     const std::function<nn::StepContext(int)>& step,
                                     models::Backward backward, double loss_scale, double* flops);

  const PipelineStats& stats() const { return stats_; }

 private:
  PipelineRunner() = default;
  using Key = std::pair<int, int>;  // (chunk, micro-batch).
  absl::StatusOr<models::Losses> Forward(const PipelineOp& op, const models::Batch& batch,
                                         const nn::StepContext& sc);
  absl::Status Backward(const PipelineOp& op, const models::Batch& batch, const nn::StepContext& sc,
                        double loss_scale);
  // A new tensor of the micro-batch's stage boundary shape.
  absl::StatusOr<Tensor> Boundary(const models::Batch& batch) const;
  // Receives into a new tensor of the micro-batch's activation shape (tag: see the .cc).
  absl::StatusOr<Tensor> Receive(const models::Batch& batch, int peer, int tag);
  // Sends t (kept alive until the send completes) without waiting.
  absl::Status Send(Tensor t, int peer, int tag);
  // Completes the sends that are done (all of them with `all`).
  absl::Status ReapSends(bool all);

  comm::Communicator* pp_ = nullptr;
  comm::PipelineSplit split_;
  std::vector<models::Model*> chunks_;
  const ExecContext* exec_ = nullptr;
  DType dtype_ = DType::kF32;
  int stage_ = 0;
  std::vector<int> last_forward_;  // Per chunk: the micro-batch of its latest StageForward.
  std::map<Key, Tensor> inputs_;   // Stage inputs of the micro-batches in flight.
  std::vector<std::pair<std::unique_ptr<comm::CommRequest>, Tensor>> sends_;
  PipelineStats stats_;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_PIPELINE_SCHEDULE_H_
