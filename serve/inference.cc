#include "serve/inference.h"

#include <utility>

#include "checkpoint/model_loading.h"
#include "core/status.h"

namespace mt {
namespace serve {

nn::StepContext InferenceSession::Step() const { return nn::StepContext::Eval(&rank.exec, tp); }

absl::StatusOr<std::unique_ptr<InferenceSession>> LoadForInference(const InferenceConfig& config,
                                                                   comm::Communicator& world,
                                                                   int local_rank, int local_size) {
  if (config.load.empty()) return absl::InvalidArgumentError("--load is required");
  ASSIGN_OR_RETURN(const DType compute_dtype, config.precision.Resolve(config.device));
  RETURN_IF_ERROR(comm::ValidateCommBackend(config.comm_backend, config.device));
  auto s = std::make_unique<InferenceSession>();
  RankExecutionOptions ro;
  ro.cuda = config.device == DeviceType::kCuda;
  ro.threads = config.threads;
  ro.local_rank = local_rank;
  ro.local_size = local_size;
  ASSIGN_OR_RETURN(s->rank, CreateRankExecution(ro));
  if (world.size() > 1) {  // One rank has nothing to communicate: no NCCL communicator for it.
    ASSIGN_OR_RETURN(s->world, comm::CreateWorldCommunicator(world, s->rank.exec.device,
                                                             config.comm_backend, local_size));
    s->tp = s->world.comm;
  }
  checkpoint::LoadModelOptions options;
  options.compute_dtype = compute_dtype;
  options.load.verify = config.checkpoint_verify;
  ASSIGN_OR_RETURN(
      checkpoint::LoadedModel loaded,
      checkpoint::LoadModel(config.load, world.rank(), world.size(), s->rank.exec, options));
  s->iteration = loaded.checkpoint.iteration;
  s->model_name = loaded.checkpoint.model_name;
  s->store = std::move(loaded.store);
  s->model = std::move(loaded.model);
  return s;
}

}  // namespace serve
}  // namespace mt
