#include "checkpoint/model_loading.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/parameter_records.h"
#include "core/alloc.h"
#include "core/status.h"
#include "models/registry.h"

namespace mt {
namespace checkpoint {

absl::StatusOr<CheckpointModel> ReadCheckpointModel(const std::string& load_dir, int64_t iteration,
                                                    FileSystem& fs) {
  CheckpointModel m;
  m.dir = load_dir;
  m.fs = &fs;
  if (iteration < 0) {
    ASSIGN_OR_RETURN(m.iteration, LatestIteration(load_dir, fs));
  } else {
    m.iteration = iteration;
  }
  ASSIGN_OR_RETURN(const CheckpointMetadata meta,
                   ReadShardMetadata(load_dir, m.iteration, /*tp_rank=*/0, /*pp_rank=*/0, fs));
  m.tp_size = meta.tp_size;
  m.pp_size = meta.pp_size;
  m.model_name = meta.model_name;
  absl::StatusOr<models::ModelConfig> config =
      models::ModelConfig::FromJson(meta.model_config_json);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ShardDir(load_dir, m.iteration, 0, 0, meta.pp_size, 0, meta.ep_size), "/",
        kShardMetadataFile,
        ": the stored model config is not a valid config: ", config.status().message()));
  }
  m.config = *std::move(config);
  return m;
}

absl::StatusOr<ParameterLoad> ReadParameters(const CheckpointModel& checkpoint,
                                             const nn::ParameterStore& store,
                                             const TensorView& host_values,
                                             const ParameterLoadOptions& options) {
  RETURN_IF_ERROR(store.CheckHostFlat("ReadParameters", host_values));
  std::vector<TensorRecord> records;
  for (int i = 0; i < store.size(); ++i) {
    records.push_back(ParameterRecord(store, i, host_values, store.spec(i).name));
  }
  ReshardedLoadOptions reshard;
  reshard.verify = options.verify;
  reshard.allow_missing = options.allow_missing;
  reshard.allow_unexpected = options.allow_unexpected;
  reshard.skip_prefixes = {kOptimizerTensorPrefix};
  ASSIGN_OR_RETURN(
      ReshardedLoad loaded,
      LoadResharded(checkpoint.dir, checkpoint.iteration, store.tp_rank(), store.tp_size(),
                    checkpoint.config.vocab_size, records, reshard, *checkpoint.fs));
  ParameterLoad result;
  result.missing = std::move(loaded.missing);
  result.ignored = std::move(loaded.ignored);
  return result;
}

absl::StatusOr<ParameterLoad> LoadParameters(const CheckpointModel& checkpoint,
                                             const ExecContext& ctx, nn::ParameterStore* store,
                                             const ParameterLoadOptions& options) {
  if (!store->masters_whole()) {
    return absl::FailedPreconditionError(
        "LoadParameters: the store's masters are sharded by the distributed optimizer (load "
        "with LoadWeights)");
  }
  // The current masters on the host (the store's own memory on the CPU): parameters the
  // checkpoint lacks keep these values; the others are overwritten in place.
  HostStaging staging;
  ASSIGN_OR_RETURN(TensorView host, staging.Download(ctx, store->flat_values()));
  ASSIGN_OR_RETURN(ParameterLoad result, ReadParameters(checkpoint, *store, host, options));
  // Uploads the masters (a no-op copy on the CPU) and refreshes the compute copies.
  RETURN_IF_ERROR(store->CopyValuesFromHost(ctx, host));
  return result;
}

absl::StatusOr<LoadedModel> LoadModel(const std::string& load_dir, int tp_rank, int tp_size,
                                      const ExecContext& ctx, const LoadModelOptions& options,
                                      FileSystem& fs) {
  LoadedModel m;
  ASSIGN_OR_RETURN(m.checkpoint, ReadCheckpointModel(load_dir, options.iteration, fs));
  m.store =
      std::make_unique<nn::ParameterStore>(tp_rank, tp_size, options.compute_dtype, ctx.device);
  ASSIGN_OR_RETURN(m.model, models::CreateModel(m.checkpoint.config, m.store.get(), options.model));
  RETURN_IF_ERROR(m.store->Allocate(options.seed));
  ASSIGN_OR_RETURN(m.load, LoadParameters(m.checkpoint, ctx, m.store.get(), options.load));
  return m;
}

}  // namespace checkpoint
}  // namespace mt
