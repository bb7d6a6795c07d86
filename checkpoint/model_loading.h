// Loading a model from a training checkpoint (checkpoint.h, training_state.h) for inference or
// fine-tuning, at any tensor-parallel degree that divides the heads:
//
//   ASSIGN_OR_RETURN(LoadedModel m, LoadModel("ckpt", tp_rank, tp_size, exec, {}));
//   m.model->Logits(sc, tokens, logits);   // m.checkpoint.config: the stored model config
//
// or in steps, for a caller that changes what it builds (e.g. RACE: a pretrained BERT with a
// multiple-choice head the checkpoint lacks):
//
//   ASSIGN_OR_RETURN(CheckpointModel ckpt, ReadCheckpointModel("ckpt"));
//   nn::ParameterStore store(tp_rank, tp_size, DType::kBF16, exec.device);
//   models::ModelOptions heads;
//   heads.heads = models::Heads::kMultipleChoice;
//   ASSIGN_OR_RETURN(auto model, models::CreateModel(ckpt.config, &store, heads));
//   RETURN_IF_ERROR(store.Allocate(seed));                  // The new head's initial values.
//   ParameterLoadOptions subset;
//   subset.allow_missing = subset.allow_unexpected = true;
//   ASSIGN_OR_RETURN(ParameterLoad loaded, LoadParameters(ckpt, exec, &store, subset));
//   // loaded.missing: the multiple-choice head; loaded.ignored: the MLM and SOP heads
//
// Only the parameters are read (the f32 master weights; the optimizer's tensors are skipped), so
// the store's compute dtype and device are the caller's choice. A checkpoint saved at another TP
// degree or with pipeline stages is resharded in memory, one tensor at a time
// (LoadResharded, checkpoint.h): each rank reads the global tensors it needs from the source shards
// of the stage holding them and keeps its slice; vocab-padded tensors keep the real vocabulary's
// rows and their padding rows are zero whatever the degree.
//
// Every function only reads files; none communicates, so ranks may load at different times.
#ifndef MT_CHECKPOINT_MODEL_LOADING_H_
#define MT_CHECKPOINT_MODEL_LOADING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/file_system.h"
#include "core/tensor.h"
#include "models/config.h"
#include "models/model.h"
#include "nn/parameter.h"

namespace mt {
namespace checkpoint {

// What a checkpoint says about its model (from shard 0's metadata.json).
struct CheckpointModel {
  std::string dir;             // The checkpoint directory (as given).
  int64_t iteration = 0;       // The iteration read.
  int tp_size = 1;             // The TP degree it was saved with.
  int pp_size = 1;             // Its pipeline stages (any layout loads into any model).
  std::string model_name;      // The registered model the run started from; may be empty.
  models::ModelConfig config;  // The stored model config.
  // What it was read through; LoadParameters and ReadParameters read the tensors through it too.
  FileSystem* fs = &DefaultFileSystem();
};

// The model of iteration `iteration` of load_dir (< 0: the latest committed one).
// Errors, each one line naming the file: NotFound when there is no checkpoint (or no such
// iteration); DataLoss for a corrupt or incomplete checkpoint; InvalidArgument for a stored model
// config that is not a valid config (naming the key).
absl::StatusOr<CheckpointModel> ReadCheckpointModel(const std::string& load_dir,
                                                    int64_t iteration = -1,
                                                    FileSystem& fs = DefaultFileSystem());

struct ParameterLoadOptions {
  // Parameters of the store the checkpoint lacks keep their current values (e.g. a new task
  // head after Allocate); false: FailedPrecondition listing them.
  bool allow_missing = false;
  // Checkpoint parameters the store lacks are ignored (e.g. pretraining heads when
  // fine-tuning); false: FailedPrecondition listing them.
  bool allow_unexpected = false;
  // Which digest of each tensor is checked (checkpoint.h).
  CheckpointVerify verify = CheckpointVerify::kCrc32c;
};

// What LoadParameters did besides filling the store.
struct ParameterLoad {
  std::vector<std::string> missing;  // Store parameters kept as they were (allow_missing).
  std::vector<std::string> ignored;  // Checkpoint parameters not loaded (allow_unexpected).
};

// Overwrites the f32 master weights of `store` (allocated, on ctx.device, any TP degree) with
// checkpoint.config's parameters from the checkpoint, then refreshes the compute-dtype copies.
// The store must have been declared from a config with checkpoint.config's vocab_size (the
// padded vocabulary may differ with the TP degree). ctx: its device is the store's (copies only).
// Errors: those of LoadResharded (checkpoint.h), e.g. FailedPrecondition naming a tensor whose
// shape differs from the store's, or listing the names not allowed to differ; nothing in the
// store changes then. ResourceExhausted / Internal for device copies.
absl::StatusOr<ParameterLoad> LoadParameters(const CheckpointModel& checkpoint,
                                             const ExecContext& ctx, nn::ParameterStore* store,
                                             const ParameterLoadOptions& options = {});
// The same into `host_values` (f32 [store.NumLocalElements()] on the host, the store's flat
// layout, holding the current masters: parameters the checkpoint lacks keep them), for a caller
// that sets the masters itself (the training job's optimizer when it holds them sharded:
// train::LoadWeights).
absl::StatusOr<ParameterLoad> ReadParameters(const CheckpointModel& checkpoint,
                                             const nn::ParameterStore& store,
                                             const TensorView& host_values,
                                             const ParameterLoadOptions& options = {});

struct LoadModelOptions {
  int64_t iteration = -1;  // < 0: the latest.
  DType compute_dtype = DType::kF32;
  models::ModelOptions model;  // Heads and recomputation, as models::CreateModel takes them.
  ParameterLoadOptions load;
  // The initial values of parameters the checkpoint lacks (with load.allow_missing).
  uint64_t seed = 1234;
};

// A model built from a checkpoint. `model` uses `store`; destroy the model first (the members'
// order does that).
struct LoadedModel {
  CheckpointModel checkpoint;
  ParameterLoad load;
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<models::Model> model;
};

// ReadCheckpointModel, then models::CreateModel(checkpoint.config) in a store of (tp_rank,
// tp_size, options.compute_dtype, ctx.device), Allocate(options.seed) and LoadParameters.
// Errors: those of the three; from CreateModel, NotFound listing the registered architectures
// when the checkpoint's is not linked into the binary, InvalidArgument when tp_size does not
// divide the heads (or the FFN width).
absl::StatusOr<LoadedModel> LoadModel(const std::string& load_dir, int tp_rank, int tp_size,
                                      const ExecContext& ctx, const LoadModelOptions& options = {},
                                      FileSystem& fs = DefaultFileSystem());

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_MODEL_LOADING_H_
