#include "train/training_state.h"

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/exec_context.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace train {

std::vector<TensorRecord> TrainingRecords(const nn::ParameterStore& store,
                                          const Optimizer& optimizer,
                                          const HostTrainingState* host) {
  std::vector<TensorRecord> records;
  const auto in = [&](const Tensor& flat, int i) {
    return TensorView(flat.data_as<float>() + store.offset(i), store.value(i).shape, DType::kF32);
  };
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    TensorRecord r;
    r.global_shape = spec.global_shape;
    r.split_dim = spec.split_dim;
    r.vocab_padded = spec.vocab_padded;
    r.name = spec.name;
    r.local = host != nullptr ? in(host->values, i) : store.value(i);
    records.push_back(r);
    r.name = "optimizer.exp_avg." + spec.name;
    r.local = host != nullptr ? in(host->exp_avg, i) : optimizer.exp_avg(i);
    records.push_back(r);
    r.name = "optimizer.exp_avg_sq." + spec.name;
    r.local = host != nullptr ? in(host->exp_avg_sq, i) : optimizer.exp_avg_sq(i);
    records.push_back(r);
  }
  return records;
}

namespace {

// Host-to-device copies need no stream or library handles: a context naming the store's device.
ExecContext StoreContext(const nn::ParameterStore& store) {
  ExecContext ctx;
  ctx.device = store.device();
  return ctx;
}

}  // namespace

absl::Status SaveTrainingState(const std::string& save_dir, int keep_last,
                               comm::ParallelContext& parallel, const models::ModelConfig& config,
                               const nn::ParameterStore& store, const Optimizer& optimizer,
                               const LossScaler& scaler, const LrSchedule& schedule,
                               const TrainingCounters& counters) {
  if (parallel.dp_rank() == 0) {
    CheckpointMetadata meta;
    meta.model_config_json = config.ToJson();
    meta.tp_size = parallel.tp_size();
    meta.tp_rank = parallel.tp_rank();
    meta.dp_size = parallel.dp_size();
    meta.iteration = counters.iteration;
    meta.consumed_samples = counters.consumed_samples;
    nlohmann::json state = {{"optimizer_step", optimizer.step()},
                            {"loss_scaler", scaler.Serialize()},
                            {"lr_schedule_samples", schedule.samples()},
                            {"skipped_iterations", counters.skipped_iterations},
                            {"seed", counters.seed}};
    meta.trainer_state_json = state.dump();
    if (store.device().is_cpu()) {
      RETURN_IF_ERROR(SaveShard(save_dir, meta, TrainingRecords(store, optimizer)));
    } else {
      // A GPU store: write from host copies.
      const ExecContext ctx = StoreContext(store);
      HostTrainingState host;
      ASSIGN_OR_RETURN(host.values, store.CopyValuesToHost(ctx));
      ASSIGN_OR_RETURN(host.exp_avg, CopyToHost(ctx, optimizer.exp_avg()));
      ASSIGN_OR_RETURN(host.exp_avg_sq, CopyToHost(ctx, optimizer.exp_avg_sq()));
      RETURN_IF_ERROR(SaveShard(save_dir, meta, TrainingRecords(store, optimizer, &host)));
    }
  }
  RETURN_IF_ERROR(parallel.world().Barrier());
  if (parallel.rank() == 0) {
    RETURN_IF_ERROR(CommitCheckpoint(save_dir, counters.iteration, parallel.tp_size(), keep_last));
  }
  return parallel.world().Barrier();
}

absl::Status LoadTrainingState(const std::string& load_dir, comm::ParallelContext& parallel,
                               const models::ModelConfig& config, nn::ParameterStore* store,
                               Optimizer* optimizer, LossScaler* scaler, LrSchedule* schedule,
                               TrainingCounters* counters) {
  ASSIGN_OR_RETURN(int64_t iteration, LatestIteration(load_dir));
  CheckpointMetadata meta;
  if (store->device().is_cpu()) {
    RETURN_IF_ERROR(LoadShard(load_dir, iteration, parallel.tp_rank(), parallel.tp_size(),
                              config.ToJson(), TrainingRecords(*store, *optimizer), &meta));
    // The masters changed: the modules' compute-dtype copies must follow (no-op for f32).
    RETURN_IF_ERROR(store->RefreshComputeWeights(ExecContext{}));
  } else {
    // A GPU store: read into host copies, then upload (which also refreshes the compute copies).
    const int64_t n = store->NumLocalElements();
    HostTrainingState host{Tensor::Host({n}, DType::kF32), Tensor::Host({n}, DType::kF32),
                           Tensor::Host({n}, DType::kF32)};
    RETURN_IF_ERROR(LoadShard(load_dir, iteration, parallel.tp_rank(), parallel.tp_size(),
                              config.ToJson(), TrainingRecords(*store, *optimizer, &host), &meta));
    const ExecContext ctx = StoreContext(*store);
    RETURN_IF_ERROR(store->CopyValuesFromHost(ctx, host.values.view()));
    RETURN_IF_ERROR(CopyTensor(ctx, host.exp_avg.view(), optimizer->exp_avg()));
    RETURN_IF_ERROR(CopyTensor(ctx, host.exp_avg_sq.view(), optimizer->exp_avg_sq()));
  }
  nlohmann::json state = nlohmann::json::parse(meta.trainer_state_json, nullptr, false);
  if (state.is_discarded() || !state.contains("optimizer_step") ||
      !state.contains("loss_scaler") || !state.contains("lr_schedule_samples")) {
    return absl::DataLossError(absl::StrCat("checkpoint ", load_dir, " iteration ", iteration,
                                            ": malformed trainer state"));
  }
  optimizer->set_step(state["optimizer_step"].get<int64_t>());
  RETURN_IF_ERROR(scaler->Restore(state["loss_scaler"].get<std::string>()));
  schedule->set_samples(state["lr_schedule_samples"].get<int64_t>());
  counters->iteration = meta.iteration;
  counters->consumed_samples = meta.consumed_samples;
  counters->skipped_iterations = state.value("skipped_iterations", int64_t{0});
  counters->seed = state.value("seed", uint64_t{0});
  return absl::OkStatus();
}

}  // namespace train
}  // namespace mt
