#include "train/training_state.h"

#include <cstring>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/parameter_records.h"
#include "core/alloc.h"
#include "core/exec_context.h"
#include "core/status.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace train {

using checkpoint::CheckpointMetadata;
using checkpoint::CheckpointModel;
using checkpoint::CommitCheckpoint;
using checkpoint::kMomentTensorNames;
using checkpoint::kOptimizerTensorPrefix;
using checkpoint::LatestIteration;
using checkpoint::LoadParameters;
using checkpoint::LoadResharded;
using checkpoint::LoadShard;
using checkpoint::ParameterLoad;
using checkpoint::ParameterLoadOptions;
using checkpoint::ParameterRecord;
using checkpoint::ReadParameters;
using checkpoint::ReadShardMetadata;
using checkpoint::ReshardedLoad;
using checkpoint::ReshardedLoadOptions;
using checkpoint::SaveShard;
using checkpoint::TensorRecord;

namespace {

// Whether this rank writes its TP/PP shard: DP rank 0 and CP rank 0 (the other ranks of a DP x CP
// group hold the same shard; the distributed optimizer gathers its state to this rank, rank 0 of
// DP x CP). A checkpoint therefore does not depend on the DP or CP size. With expert parallelism
// (`ep`, the optimizer's expert-parallel group; null without) every rank of DP rank 0's EP group
// (DP ranks 0 .. E-1) writes the shard of its EP rank.
bool WritesShard(const comm::ParallelContext& parallel, const comm::Communicator* ep) {
  if (parallel.cp_rank() != 0) return false;
  return ep != nullptr ? parallel.dp_rank() < ep->size() : parallel.dp_rank() == 0;
}

// The expert index e of `name` ("<...>.experts.<e>.<...>", models/variants/moe's expert
// parameters, named by their global index).
int ExpertIndex(const std::string& name) {
  const std::string key = ".experts.";
  const size_t at = name.find(key);
  CHECK(at != std::string::npos) << "expert-parallel parameter " << name << " has no '" << key
                                 << "<index>.' in its name";
  const size_t begin = at + key.size(), end = name.find('.', begin);
  return std::stoi(name.substr(begin, end - begin));
}

// The global indices of the store's expert-parallel parameters' experts, sorted.
std::vector<int> StoreExperts(const nn::ParameterStore& store) {
  std::set<int> experts;
  for (int i = 0; i < store.size(); ++i) {
    if (store.spec(i).expert) experts.insert(ExpertIndex(store.spec(i).name));
  }
  return std::vector<int>(experts.begin(), experts.end());
}

}  // namespace

namespace {

// Flat f32 [store.NumLocalElements()] views of the master values and the two Adam moments.
struct FlatState {
  TensorView values, exp_avg, exp_avg_sq;
};

// Which parameters a shard holds: all, or (an expert-parallel rank other than 0) its experts.
enum class Holds { kAll, kExperts };

// The records of every parameter (or expert parameter) and its Adam moments over `flat`, in the
// store's layout.
std::vector<TensorRecord> Records(const nn::ParameterStore& store, const FlatState& flat,
                                  Holds holds = Holds::kAll) {
  std::vector<TensorRecord> records;
  const TensorView moments[] = {flat.exp_avg, flat.exp_avg_sq};  // kMomentTensorNames' order.
  static_assert(std::size(moments) == std::size(kMomentTensorNames));
  for (int i = 0; i < store.size(); ++i) {
    if (holds == Holds::kExperts && !store.spec(i).expert) continue;
    const std::string& name = store.spec(i).name;
    records.push_back(ParameterRecord(store, i, flat.values, name));
    for (size_t k = 0; k < std::size(moments); ++k) {
      records.push_back(ParameterRecord(
          store, i, moments[k], absl::StrCat(kOptimizerTensorPrefix, kMomentTensorNames[k], name)));
    }
  }
  return records;
}

// The live flat tensors; the values are left empty when the optimizer holds them sharded.
FlatState LiveState(const nn::ParameterStore& store, const Optimizer& optimizer) {
  return {optimizer.masters_sharded() ? TensorView() : store.flat_values(), optimizer.exp_avg(),
          optimizer.exp_avg_sq()};
}

// Host staging of the three flat tensors: the live tensors themselves for a store in host
// memory, host copies otherwise.
struct HostStagings {
  HostStaging values, exp_avg, exp_avg_sq;
};

// Copies and transfers need no stream or library handles: a context naming the store's device.
ExecContext StoreContext(const nn::ParameterStore& store) {
  ExecContext ctx;
  ctx.device = store.device();
  return ctx;
}

std::string TrainerStateJson(const Optimizer& optimizer, const LossScaler& scaler,
                             const LrSchedule& schedule, const TrainingCounters& counters) {
  const nlohmann::json state = {{"optimizer_step", optimizer.step()},
                                {"loss_scaler", scaler.Serialize()},
                                {"lr_schedule_samples", schedule.samples()},
                                {"skipped_iterations", counters.skipped_iterations},
                                {"seed", counters.seed}};
  return state.dump();
}

// The metadata of this rank's shard (`ep`: the optimizer's expert-parallel group, or null).
CheckpointMetadata ShardMetadata(const comm::ParallelContext& parallel,
                                 const models::ModelConfig& config,
                                 const std::string& trainer_state, const TrainingCounters& counters,
                                 const std::string& model_name, const nn::ParameterStore& store,
                                 const comm::Communicator* ep) {
  CheckpointMetadata meta;
  if (ep != nullptr) {
    meta.ep_size = ep->size();
    meta.ep_rank = ep->rank();
    meta.experts = StoreExperts(store);
  }
  meta.model_config_json = config.ToJson();
  meta.model_name = model_name;
  meta.tp_size = parallel.tp_size();
  meta.tp_rank = parallel.tp_rank();
  meta.dp_size = parallel.dp_size();
  meta.pp_size = parallel.pp_size();
  meta.pp_rank = parallel.pp_rank();
  meta.iteration = counters.iteration;
  meta.consumed_samples = counters.consumed_samples;
  meta.trainer_state_json = trainer_state;
  return meta;
}

// Writes this rank's shard of `live` (called on the writers only, WritesShard).
absl::Status SaveThisShard(FileSystem& fs, const std::string& save_dir,
                           const comm::ParallelContext& parallel, const models::ModelConfig& config,
                           const nn::ParameterStore& store, const FlatState& live,
                           const std::string& trainer_state, const TrainingCounters& counters,
                           const std::string& model_name, const comm::Communicator* ep) {
  const CheckpointMetadata meta =
      ShardMetadata(parallel, config, trainer_state, counters, model_name, store, ep);
  const ExecContext ctx = StoreContext(store);
  HostStagings staging;
  FlatState host;
  ASSIGN_OR_RETURN(host.values, staging.values.Download(ctx, live.values));
  ASSIGN_OR_RETURN(host.exp_avg, staging.exp_avg.Download(ctx, live.exp_avg));
  ASSIGN_OR_RETURN(host.exp_avg_sq, staging.exp_avg_sq.Download(ctx, live.exp_avg_sq));
  return SaveShard(save_dir, meta,
                   Records(store, host, meta.ep_rank > 0 ? Holds::kExperts : Holds::kAll), fs);
}

// Restores the optimizer step, loss scaler, LR schedule and counters from the shard's metadata.
absl::Status RestoreTrainerState(const std::string& load_dir, const CheckpointMetadata& meta,
                                 Optimizer* optimizer, LossScaler* scaler, LrSchedule* schedule,
                                 TrainingCounters* counters) {
  nlohmann::json state = nlohmann::json::parse(meta.trainer_state_json, nullptr, false);
  if (state.is_discarded() || !state.contains("optimizer_step") || !state.contains("loss_scaler") ||
      !state.contains("lr_schedule_samples")) {
    return absl::DataLossError(absl::StrCat("checkpoint ", load_dir, " iteration ", meta.iteration,
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

// Fills `records` (this rank's tensors) from checkpoint `iteration`: from the shard of this TP
// rank and pipeline stage when the checkpoint has this run's layout, else, at the same TP degree,
// from whichever stages of the checkpoint hold them (a pipeline laid out otherwise, or none, or
// `experts_sharded`: this rank's experts are some of the checkpoint's; or the checkpoint's experts
// are in expert-parallel shards, read from whichever holds each).
absl::Status LoadThisStage(FileSystem& fs, const std::string& load_dir, int64_t iteration,
                           const comm::ParallelContext& parallel, const models::ModelConfig& config,
                           const std::vector<TensorRecord>& records, bool experts_sharded,
                           checkpoint::CheckpointVerify verify, CheckpointMetadata* meta) {
  ASSIGN_OR_RETURN(const CheckpointMetadata first,
                   ReadShardMetadata(load_dir, iteration, /*tp_rank=*/0, /*pp_rank=*/0, fs));
  const bool same_stages = first.pp_size == 1 && parallel.pp_size() == 1;
  const bool same_experts = !experts_sharded && first.ep_size == 1;
  if ((same_stages && same_experts) || first.tp_size != parallel.tp_size()) {
    // LoadShard also refuses another TP degree, saying how to convert the checkpoint.
    return LoadShard(load_dir, iteration, parallel.tp_rank(), parallel.tp_size(), config.ToJson(),
                     records, meta, parallel.pp_rank(), parallel.pp_size(), fs, verify);
  }
  ReshardedLoadOptions options;
  options.allow_unexpected = true;  // The other stages' tensors, the other EP ranks' experts.
  options.keep_padding_rows = true;
  options.expected_model_config_json = config.ToJson();
  options.verify = verify;
  ASSIGN_OR_RETURN(const ReshardedLoad loaded,
                   LoadResharded(load_dir, iteration, parallel.tp_rank(), parallel.tp_size(),
                                 config.vocab_size, records, options, fs));
  *meta = loaded.meta;
  return absl::OkStatus();
}

}  // namespace

std::vector<TensorRecord> TrainingRecords(const nn::ParameterStore& store,
                                          const Optimizer& optimizer,
                                          const HostTrainingState* host) {
  if (host == nullptr) {
    CHECK(!optimizer.distributed()) << "TrainingRecords of a distributed optimizer need `host`";
    return Records(store, LiveState(store, optimizer));
  }
  return Records(store, {host->values.view(), host->exp_avg.view(), host->exp_avg_sq.view()});
}

absl::Status SaveTrainingState(const std::string& save_dir, int keep_last,
                               comm::ParallelContext& parallel, const models::ModelConfig& config,
                               const nn::ParameterStore& store, const Optimizer& optimizer,
                               const LossScaler& scaler, const LrSchedule& schedule,
                               const TrainingCounters& counters, const std::string& model_name,
                               FileSystem& fs) {
  FlatState live = LiveState(store, optimizer);
  // A distributed optimizer's moments (and sharded masters) are gathered whole on DP rank 0, the
  // writer, in host memory (every DP rank takes part; no rank holds them whole on its device),
  // so the checkpoint has the unsharded layout and loads at any DP size.
  Tensor host_values, host_exp_avg, host_exp_avg_sq;
  if (optimizer.distributed()) {
    if (WritesShard(parallel, optimizer.expert_parallel())) {
      const Shape flat = {store.NumLocalElements()};
      host_exp_avg = Tensor::Host(flat, DType::kF32);
      host_exp_avg_sq = Tensor::Host(flat, DType::kF32);
      live.exp_avg = host_exp_avg.view();
      live.exp_avg_sq = host_exp_avg_sq.view();
      if (optimizer.masters_sharded()) {
        host_values = Tensor::Host(flat, DType::kF32);
        live.values = host_values.view();
      }
    }
    RETURN_IF_ERROR(optimizer.GatherStateToRoot(StoreContext(store), host_values.view(),
                                                host_exp_avg.view(), host_exp_avg_sq.view()));
  }
  // With expert parallelism each rank of DP rank 0's EP group writes its own experts' shard.
  const comm::Communicator* ep = optimizer.expert_parallel();
  if (WritesShard(parallel, ep)) {
    RETURN_IF_ERROR(SaveThisShard(fs, save_dir, parallel, config, store, live,
                                  TrainerStateJson(optimizer, scaler, schedule, counters), counters,
                                  model_name, ep));
  }
  return CommitTrainingState(save_dir, keep_last, parallel, counters.iteration,
                             ep != nullptr ? ep->size() : 1, fs);
}

absl::Status CommitTrainingState(const std::string& save_dir, int keep_last,
                                 comm::ParallelContext& parallel, int64_t iteration, int ep_size,
                                 FileSystem& fs) {
  RETURN_IF_ERROR(parallel.world().Barrier());
  if (parallel.rank() == 0) {
    RETURN_IF_ERROR(CommitCheckpoint(save_dir, iteration, parallel.tp_size(), keep_last,
                                     parallel.pp_size(), ep_size, fs));
  }
  return parallel.world().Barrier();
}

int64_t TrainingSnapshot::bytes() const {
  return values_.view().nbytes() + exp_avg_.view().nbytes() + exp_avg_sq_.view().nbytes();
}

absl::Status TrainingSnapshot::Write(const std::string& save_dir, FileSystem& fs) const {
  if (!writer_) return absl::OkStatus();
  return SaveShard(save_dir, meta_, records_, fs);
}

void TrainingSnapshot::CopyDeferred() {
  for (const Copy& c : deferred_) std::memcpy(c.to.data, c.from.data, c.from.nbytes());
  deferred_.clear();
}

namespace {

// dst <- src (same shape, f32): in parallel chunks on `pool` when both are in host memory.
absl::Status CopyForSnapshot(const ExecContext& ctx, ThreadPool* pool, const TensorView& src,
                             const TensorView& dst) {
  if (!InHostMemory(src) || pool == nullptr) return CopyTensor(ctx, src, dst);
  const auto* from = static_cast<const char*>(src.data);
  auto* to = static_cast<char*>(dst.data);
  ParallelFor(
      pool, static_cast<int64_t>(src.nbytes()), int64_t{1} << 22,
      [&](int64_t begin, int64_t end) { std::memcpy(to + begin, from + begin, end - begin); });
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingSnapshot>> ReserveTrainingSnapshot(
    const comm::ParallelContext& parallel, const nn::ParameterStore& store,
    const Optimizer& optimizer, ThreadPool* pool) {
  auto snap = std::make_unique<TrainingSnapshot>();
  if (!WritesShard(parallel, optimizer.expert_parallel())) return snap;
  ExecContext host;
  host.pool = pool;  // SetZero fills large host buffers on all of the pool's threads.
  for (Tensor* t : {&snap->values_, &snap->exp_avg_, &snap->exp_avg_sq_}) {
    *t = Tensor::Host({store.NumLocalElements()}, DType::kF32);
    RETURN_IF_ERROR(SetZero(host, t->view()));
  }
  return snap;
}

absl::StatusOr<std::unique_ptr<TrainingSnapshot>> SnapshotTrainingState(
    comm::ParallelContext& parallel, const models::ModelConfig& config,
    const nn::ParameterStore& store, const Optimizer& optimizer, const LossScaler& scaler,
    const LrSchedule& schedule, const TrainingCounters& counters, const std::string& model_name,
    ThreadPool* pool, std::unique_ptr<TrainingSnapshot> reuse, bool defer_copy) {
  auto snap = reuse != nullptr ? std::move(reuse) : std::make_unique<TrainingSnapshot>();
  snap->deferred_.clear();
  const comm::Communicator* ep = optimizer.expert_parallel();
  snap->writer_ = WritesShard(parallel, ep);
  snap->meta_ =
      ShardMetadata(parallel, config, TrainerStateJson(optimizer, scaler, schedule, counters),
                    counters, model_name, store, ep);
  snap->records_.clear();
  const Shape flat = {store.NumLocalElements()};
  for (Tensor* t : {&snap->values_, &snap->exp_avg_, &snap->exp_avg_sq_}) {
    if (!snap->writer_) {
      *t = Tensor();
    } else if (t->view().shape != flat || t->dtype() != DType::kF32) {
      *t = Tensor::Host(flat, DType::kF32);
    }
  }
  const ExecContext ctx = StoreContext(store);
  const FlatState live = LiveState(store, optimizer);
  if (snap->writer_ && defer_copy && !optimizer.distributed() && InHostMemory(live.values) &&
      InHostMemory(live.exp_avg) && InHostMemory(live.exp_avg_sq)) {
    snap->deferred_ = {{live.values, snap->values_.view()},
                       {live.exp_avg, snap->exp_avg_.view()},
                       {live.exp_avg_sq, snap->exp_avg_sq_.view()}};
  } else if (optimizer.distributed()) {
    // The moments (and sharded masters) are gathered into the snapshot on DP rank 0.
    RETURN_IF_ERROR(optimizer.GatherStateToRoot(
        ctx, optimizer.masters_sharded() ? snap->values_.view() : TensorView(),
        snap->exp_avg_.view(), snap->exp_avg_sq_.view()));
  } else if (snap->writer_) {
    RETURN_IF_ERROR(CopyForSnapshot(ctx, pool, live.exp_avg, snap->exp_avg_.view()));
    RETURN_IF_ERROR(CopyForSnapshot(ctx, pool, live.exp_avg_sq, snap->exp_avg_sq_.view()));
  }
  if (snap->writer_ && !optimizer.masters_sharded() && !snap->copy_deferred()) {
    RETURN_IF_ERROR(CopyForSnapshot(ctx, pool, live.values, snap->values_.view()));
  }
  if (snap->writer_) {  // An EP rank other than 0: its own experts only.
    snap->records_ =
        Records(store, {snap->values_.view(), snap->exp_avg_.view(), snap->exp_avg_sq_.view()},
                snap->meta_.ep_rank > 0 ? Holds::kExperts : Holds::kAll);
  }
  return snap;
}

absl::Status LoadTrainingState(const std::string& load_dir, comm::ParallelContext& parallel,
                               const models::ModelConfig& config, nn::ParameterStore* store,
                               Optimizer* optimizer, LossScaler* scaler, LrSchedule* schedule,
                               TrainingCounters* counters, FileSystem& fs,
                               checkpoint::CheckpointVerify verify) {
  ASSIGN_OR_RETURN(int64_t iteration, LatestIteration(load_dir, fs));
  // Read into the live tensors in host memory, else into host staging that is then uploaded.
  const ExecContext ctx = StoreContext(*store);
  FlatState live = LiveState(*store, *optimizer);
  // A distributed optimizer reads the whole moments (and sharded masters) on the host and keeps
  // its shard of them.
  Tensor whole_values, whole_exp_avg, whole_exp_avg_sq;
  if (optimizer->masters_sharded()) {
    whole_values = Tensor::Host({store->NumLocalElements()}, DType::kF32);
    live.values = whole_values.view();
  }
  if (optimizer->distributed()) {
    whole_exp_avg = Tensor::Host({store->NumLocalElements()}, DType::kF32);
    whole_exp_avg_sq = Tensor::Host({store->NumLocalElements()}, DType::kF32);
    live.exp_avg = whole_exp_avg.view();
    live.exp_avg_sq = whole_exp_avg_sq.view();
  }
  HostStagings staging;
  FlatState host;
  ASSIGN_OR_RETURN(host.values, staging.values.ForWriting(live.values));
  ASSIGN_OR_RETURN(host.exp_avg, staging.exp_avg.ForWriting(live.exp_avg));
  ASSIGN_OR_RETURN(host.exp_avg_sq, staging.exp_avg_sq.ForWriting(live.exp_avg_sq));
  CheckpointMetadata meta;
  RETURN_IF_ERROR(LoadThisStage(fs, load_dir, iteration, parallel, config, Records(*store, host),
                                optimizer->expert_parallel() != nullptr, verify, &meta));
  // The masters changed: LoadValues also sets the compute-dtype copies.
  RETURN_IF_ERROR(optimizer->LoadValues(ctx, host.values));
  RETURN_IF_ERROR(optimizer->LoadMoments(ctx, host.exp_avg, host.exp_avg_sq));
  return RestoreTrainerState(load_dir, meta, optimizer, scaler, schedule, counters);
}

absl::StatusOr<ParameterLoad> LoadWeights(const CheckpointModel& checkpoint, const ExecContext& ctx,
                                          nn::ParameterStore* store, Optimizer* optimizer,
                                          const ParameterLoadOptions& options) {
  if (!optimizer->masters_sharded()) return LoadParameters(checkpoint, ctx, store, options);
  Tensor host = Tensor::Host({store->NumLocalElements()}, DType::kF32);
  RETURN_IF_ERROR(optimizer->GatherValues(ctx, host.view()));
  ASSIGN_OR_RETURN(ParameterLoad result, ReadParameters(checkpoint, *store, host.view(), options));
  RETURN_IF_ERROR(optimizer->LoadValues(ctx, host.view()));
  return result;
}

}  // namespace train
}  // namespace mt
