// Saving and restoring everything a training run needs to continue bit-identically: parameters
// (f32 master weights), Adam moments, the optimizer step, the loss scaler, the LR schedule, the
// consumed-samples count and the skipped-step count. Dropout needs no RNG state: its masks are a
// pure function of (seed, iteration, global sample index).
//
// Tensors: "<param>", "optimizer.exp_avg.<param>", "optimizer.exp_avg_sq.<param>", each with its
// parameter's partitioning (model_loading.h reads the parameters alone, at any TP degree and
// pipeline layout). Only data-parallel rank 0 of each TP group of each pipeline stage writes its
// shard (mp_rank_TT_PPP with pipeline stages: the stage's own parameters, the tied word embedding
// in the first and the last stage); global rank 0 commits after a barrier over the world. A
// distributed optimizer (train/distributed_optimizer.h) saves the same layout: its moment shards
// are all-gathered over the DP group first (transiently the whole moments on every DP rank), and
// loading keeps each rank's shard of them, so a checkpoint loads at any DP size with or without the
// distributed optimizer, and every consumer (the reshard tool too) reads it unchanged.
// With expert parallelism (the optimizer's expert_parallel() group of E ranks) each rank of DP
// rank 0's EP group writes its own shard, mp_rank_TT[_PPP]_EEE (checkpoint/checkpoint.h): EP rank
// 0 the dense parameters and its experts, the others their experts only, so no rank gathers the
// others' experts; loading reads each expert from the shard holding it, at any EP size (a
// checkpoint of every expert in one shard, saved at EP 1 or before these shards, loads too).
#ifndef MT_TRAIN_TRAINING_STATE_H_
#define MT_TRAIN_TRAINING_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_loading.h"
#include "comm/parallel_context.h"
#include "core/file_system.h"
#include "core/thread_pool.h"
#include "models/config.h"
#include "nn/parameter.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace mt {
namespace train {

struct TrainingCounters {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  int64_t skipped_iterations = 0;
  uint64_t seed = 0;
};

// Host copies, in the store's flat layout, of the f32 master values and the two Adam moments (of
// a store on a GPU, say), for TrainingRecords. Save/LoadTrainingState stage a store that is not in
// host memory through core/alloc.h's HostStaging themselves.
struct HostTrainingState {
  Tensor values, exp_avg, exp_avg_sq;  // f32 [store.NumLocalElements()] each.
};

// The records of every parameter and its Adam moments: views of the live tensors (on the store's
// device), or of `host` when given (which must hold the store's flat layout). A distributed
// optimizer has no live moments in that layout: give `host` (Optimizer::GatherStateToRoot).
std::vector<checkpoint::TensorRecord> TrainingRecords(const nn::ParameterStore& store,
                                                      const Optimizer& optimizer,
                                                      const HostTrainingState* host = nullptr);

// Collective over the world: saves iteration counters.iteration under save_dir and commits it,
// keeping the last keep_last checkpoints. model_name: the registered model the run started from
// (CheckpointMetadata::model_name; empty when the model came from flags).
absl::Status SaveTrainingState(const std::string& save_dir, int keep_last,
                               comm::ParallelContext& parallel, const models::ModelConfig& config,
                               const nn::ParameterStore& store, const Optimizer& optimizer,
                               const LossScaler& scaler, const LrSchedule& schedule,
                               const TrainingCounters& counters,
                               const std::string& model_name = std::string(),
                               FileSystem& fs = DefaultFileSystem());

// A copy of this rank's training state in host memory, as SaveTrainingState writes it, to be
// written while training goes on (--async_save, train/async_save.h): owned host copies of the f32
// masters and the Adam moments, their records and the shard's metadata. Only data-parallel rank 0
// (of each TP rank and stage) writes; the other ranks' snapshots are empty (writer() false).
class TrainingSnapshot {
 public:
  int64_t iteration() const { return meta_.iteration; }
  bool writer() const { return writer_; }
  // The expert-parallel shards per TP rank and stage of the checkpoint this snapshot is part of
  // (CommitTrainingState's ep_size).
  int ep_size() const { return meta_.ep_size; }
  // Bytes of tensors held (0 on a non-writer).
  int64_t bytes() const;
  // Writes this rank's shard under save_dir (checkpoint::SaveShard); no collective, so any thread
  // may call it. A no-op on a non-writer. After CopyDeferred when copy_deferred().
  absl::Status Write(const std::string& save_dir, FileSystem& fs) const;
  // Whether part of the state is still to be copied from the live tensors
  // (SnapshotTrainingState's `defer_copy`): until CopyDeferred returns, nothing may change the
  // masters or the moments.
  bool copy_deferred() const { return !deferred_.empty(); }
  // Makes the deferred copies on this thread (no collective, so any thread may call it).
  void CopyDeferred();

 private:
  friend absl::StatusOr<std::unique_ptr<TrainingSnapshot>> ReserveTrainingSnapshot(
      const comm::ParallelContext&, const nn::ParameterStore&, const Optimizer&, ThreadPool*);
  friend absl::StatusOr<std::unique_ptr<TrainingSnapshot>> SnapshotTrainingState(
      comm::ParallelContext&, const models::ModelConfig&, const nn::ParameterStore&,
      const Optimizer&, const LossScaler&, const LrSchedule&, const TrainingCounters&,
      const std::string&, ThreadPool*, std::unique_ptr<TrainingSnapshot>, bool);
  bool writer_ = false;
  Tensor values_, exp_avg_, exp_avg_sq_;
  struct Copy {
    TensorView from, to;  // The live tensor and its place in the snapshot, both host f32.
  };
  std::vector<Copy> deferred_;
  checkpoint::CheckpointMetadata meta_;
  std::vector<checkpoint::TensorRecord> records_;
};

// This rank's snapshot of the state SaveTrainingState would save (a distributed optimizer's
// shards gathered to DP rank 0: collective over the DP group then; local otherwise). With
// expert parallelism each rank of DP rank 0's expert-parallel group snapshots its own shard
// (EP rank 0: the dense parameters and its experts; the others: their experts). A store in
// host memory is copied on `pool`'s threads (null: this thread). `reuse`: an earlier snapshot
// whose host memory is taken over (allocating and first touching 12 bytes per parameter again
// costs more than the copy). `defer_copy`: a store in host memory without a distributed
// optimizer is not copied now but by the snapshot's CopyDeferred (e.g. on the background writer,
// while the next iteration's forward and backward passes, which do not change the masters or the
// moments, run); the other cases copy now.
absl::StatusOr<std::unique_ptr<TrainingSnapshot>> SnapshotTrainingState(
    comm::ParallelContext& parallel, const models::ModelConfig& config,
    const nn::ParameterStore& store, const Optimizer& optimizer, const LossScaler& scaler,
    const LrSchedule& schedule, const TrainingCounters& counters,
    const std::string& model_name = std::string(), ThreadPool* pool = nullptr,
    std::unique_ptr<TrainingSnapshot> reuse = nullptr, bool defer_copy = false);

// The host memory of a snapshot of this store, allocated and its pages touched (on `pool`'s
// threads), for SnapshotTrainingState's `reuse`: taken at start-up, it keeps the first save's
// page faults out of the training loop. Empty on a rank that does not write (which ranks write
// depends on the optimizer's expert-parallel group).
absl::StatusOr<std::unique_ptr<TrainingSnapshot>> ReserveTrainingSnapshot(
    const comm::ParallelContext& parallel, const nn::ParameterStore& store,
    const Optimizer& optimizer, ThreadPool* pool);

// Collective over the world, once every rank's shard of `iteration` is written: rank 0 commits it
// (checkpoint::CommitCheckpoint, keeping keep_last; ep_size: the expert-parallel shards per TP
// rank and stage), between two barriers.
absl::Status CommitTrainingState(const std::string& save_dir, int keep_last,
                                 comm::ParallelContext& parallel, int64_t iteration,
                                 int ep_size = 1, FileSystem& fs = DefaultFileSystem());

// Loads the latest checkpoint under load_dir into this rank's state (f32 master weights, then the
// store's compute-dtype copies are refreshed from them). At this run's TP degree, any pipeline
// layout loads into any other (each stage reads its tensors from the checkpoint's stages holding
// them, bit for bit). NotFound if there is none; FailedPrecondition for a mismatched config or TP
// degree (with what to do) or a tensor of this stage that the checkpoint lacks; DataLoss for a
// tensor failing the digest `verify` checks (checkpoint/checkpoint.h).
absl::Status LoadTrainingState(
    const std::string& load_dir, comm::ParallelContext& parallel, const models::ModelConfig& config,
    nn::ParameterStore* store, Optimizer* optimizer, LossScaler* scaler, LrSchedule* schedule,
    TrainingCounters* counters, FileSystem& fs = DefaultFileSystem(),
    checkpoint::CheckpointVerify verify = checkpoint::CheckpointVerify::kCrc32c);

// The weights only, into the store of a training job (--finetune): checkpoint::LoadParameters
// (checkpoint/model_loading.h), or, when `optimizer` holds the masters sharded
// (Optimizer::masters_sharded), the whole masters gathered, read into and set through it
// (collective over its DP group then).
absl::StatusOr<checkpoint::ParameterLoad> LoadWeights(
    const checkpoint::CheckpointModel& checkpoint, const ExecContext& ctx,
    nn::ParameterStore* store, Optimizer* optimizer,
    const checkpoint::ParameterLoadOptions& options = {});

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_TRAINING_STATE_H_
