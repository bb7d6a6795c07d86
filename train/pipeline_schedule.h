// Pipeline-parallel schedules (Narayanan et al. 2021): which forward and backward passes a stage
// runs in which order, a simulator of their timing, and the runner that executes them on one rank
// of a pipeline with its model chunks (their models::PipelineStage: StageForward / StageBackward),
// exchanging activations and their gradients with the neighbouring stages.
//
// The order of a stage's passes, and its stages and chunks: comm/pipeline_order.h.
//
// Activations in flight: a model instance keeps the activations of its latest StageForward only,
// so the runner keeps one instance of a chunk per micro-batch in flight on it, as Megatron keeps
// every in-flight micro-batch's activations: the chunk it was given, plus instances a ChunkFactory
// creates when all are busy (declared in a ParameterStore::Mirror, so they share the parameters
// and accumulate into the same gradients). They stay for later iterations: a chunk ends up with
// as many as its own peak of micro-batches in flight (comm::PipelineInFlight::chunk_peaks, which
// models/memory.h counts). Without a factory the one
// instance serves every micro-batch: the runner keeps each in-flight micro-batch's stage INPUT and,
// before the backward of one that was not the chunk's latest forward, runs its forward again (the
// same StepContext, so the same dropout masks and bit-identical activations): activation
// checkpointing at the stage boundary, one extra forward per micro-batch on all but the last
// stage.
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
#include "comm/pipeline_order.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "models/model.h"
#include "models/pipeline_stage.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace train {

using comm::OpName;
using comm::PipelineOp;
using comm::PipelineScheduleOps;

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

// Another instance of this stage's model chunk `chunk`, with the store it declared its parameters
// in (the model reads it; destroyed after the model).
struct ChunkInstance {
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<models::Model> model;
};
using ChunkFactory = std::function<absl::StatusOr<ChunkInstance>(int chunk)>;

// Instances of the chunks models::CreateStageModels(config, store, options, split, stage) put in
// `store` (which must be allocated before the factory is called; it must outlive the instances),
// each in a ParameterStore::Mirror of it from the chunk's first handle. The errors of
// models::CreateStageModels; InvalidArgument unless `store` holds exactly those chunks' parameters.
// The factory's: those of ParameterStore::Mirror (an unallocated store) and models::CreateModel.
absl::StatusOr<ChunkFactory> StageChunkFactory(const models::ModelConfig& config,
                                               nn::ParameterStore* store,
                                               const models::ModelOptions& options,
                                               const comm::PipelineSplit& split, int stage);

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
  int64_t instances = 0;    // Chunk instances after Run(), summed over the chunks.
};

// Executes the schedules on one rank. Not thread-safe; one Run() at a time.
class PipelineRunner {
 public:
  // `pp`: the pipeline communicator (rank = stage); `split`: its stages and chunks; `chunks`: this
  // stage's models, chunk v built with comm::PipelineSplit's layers of (pp->rank(), v) (not owned,
  // outlive the runner); activations of the chunks' StageBoundaryShape in `dtype` on exec's
  // device; `more`: creates further instances of a chunk (null: recompute at the stage
  // boundary; see the file comment). InvalidArgument unless chunks.size() ==
  // split.virtual_stages and pp->size() == split.stages; Unimplemented for P > 1 over a
  // communicator without non-blocking point-to-point (NCCL: use --comm_backend=mpi), and for
  // chunks that are no pipeline stage (models::PipelineStageOf; likewise for the instances `more`
  // creates, when Run needs them).
  static absl::StatusOr<std::unique_ptr<PipelineRunner>> Create(
      comm::Communicator* pp, const comm::PipelineSplit& split, std::vector<models::Model*> chunks,
      const ExecContext* exec, DType dtype, ChunkFactory more = nullptr);

  // One iteration on micro-batches `batches` (each stage is given all of them; step(i) is the
  // StepContext of micro-batch i, the same on every stage): with Backward::kYes the schedule's
  // forwards and backwards (gradients ACCUMULATED into the chunks' stores, the loss scaled by
  // loss_scale), with kNo the forwards only, in micro-batch order. Returns the SUM over the
  // micro-batches of the losses on the stage that holds the output, Losses with zero parts (as
  // many as loss_names) elsewhere; `flops` gets this rank's chunks' TrainingFlops. Errors: the
  // models' and the communicator's; InvalidArgument for an empty `batches` or one that breaks
  // PipelineScheduleOps' conditions. After an error the runner and the other stages' runners are
  // out of step (messages may be pending): end the job.
  absl::StatusOr<models::Losses> Run(const std::vector<models::Batch>& batches,
                                     const std::function<nn::StepContext(int)>& step,
                                     models::Backward backward, double loss_scale, double* flops);

  const PipelineStats& stats() const { return stats_; }
  // The store handle of the tied word embedding's copy one of this stage's chunks holds
  // (models::PipelineStage::tied_embedding_handle), or -1 when none does.
  int tied_embedding_handle() const;

 private:
  PipelineRunner() = default;
  using Key = std::pair<int, int>;  // (chunk, micro-batch).
  struct Instance {
    models::Model* model = nullptr;
    models::PipelineStage* stage = nullptr;  // The model's.
    int micro = -1;  // The micro-batch whose activations it holds for a backward; -1: none.
  };
  // An instance of chunk c holding no micro-batch's activations: a free one, a new one from the
  // factory, or (without a factory) the first, whose micro-batch will be recomputed.
  absl::StatusOr<Instance*> FreeInstance(int c);
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
  std::vector<std::vector<Instance>> instances_;  // Per chunk; instance 0: the chunk given.
  ChunkFactory more_;
  std::vector<ChunkInstance> created_;  // By more_.
  const ExecContext* exec_ = nullptr;
  DType dtype_ = DType::kF32;
  int stage_ = 0;
  std::map<Key, Tensor> inputs_;  // Stage inputs of the micro-batches in flight.
  std::vector<std::pair<std::unique_ptr<comm::CommRequest>, Tensor>> sends_;
  PipelineStats stats_;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_PIPELINE_SCHEDULE_H_
