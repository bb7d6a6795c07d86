#include "eval/inference.h"

#include <utility>

#include "core/status.h"
#include "train/model_loading.h"

namespace mt {
namespace eval {

nn::StepContext InferenceSession::Step() const { return nn::StepContext::Eval(&rank.exec, tp); }

absl::StatusOr<std::unique_ptr<InferenceSession>> LoadForInference(const InferenceConfig& config,
                                                                   comm::Communicator& world,
                                                                   int local_rank, int local_size) {
  if (config.load.empty()) return absl::InvalidArgumentError("--load is required");
  auto s = std::make_unique<InferenceSession>();
  RankExecutionOptions ro;
  ro.cuda = config.device == DeviceType::kCuda;
  ro.threads = config.threads;
  ro.local_rank = local_rank;
  ro.local_size = local_size;
  ASSIGN_OR_RETURN(s->rank, CreateRankExecution(ro));
  s->tp = world.size() > 1 ? &world : nullptr;
  train::LoadModelOptions options;
  options.compute_dtype = config.bf16 ? DType::kBF16 : DType::kF32;
  ASSIGN_OR_RETURN(
      train::LoadedModel loaded,
      train::LoadModel(config.load, world.rank(), world.size(), s->rank.exec, options));
  s->iteration = loaded.checkpoint.iteration;
  s->model_name = loaded.checkpoint.model_name;
  s->store = std::move(loaded.store);
  s->model = std::move(loaded.model);
  return s;
}

}  // namespace eval
}  // namespace mt
