#include "jobs/pretrain/context_parallel_flags.h"

#include "absl/strings/str_cat.h"
#include "comm/parallel_context.h"
#include "core/status.h"
#include "models/context_parallel.h"

namespace mt {
namespace jobs {

absl::Status ValidateContextParallel(const PretrainConfig& c) {
  const int cp = c.context_parallel_size;
  if (cp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("context_parallel_size must be >= 1 (got ", cp, ")"));
  }
  RETURN_IF_ERROR(comm::ValidateContextParallelSequence(
      cp, c.trainer.seq_length, c.tensor_model_parallel_size, c.activations.sequence_parallel));
  if (cp == 1) return absl::OkStatus();
  if (c.expert_model_parallel_size > 1) {
    return absl::InvalidArgumentError(
        "--context_parallel_size > 1 with --expert_model_parallel_size > 1 is not implemented");
  }
  if (c.device != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        "--context_parallel_size > 1 runs on the CPU only (ring attention has no GPU kernels yet)");
  }
  // The models refuse these too, on every rank; here rank 0 says it once.
  return models::CheckContextParallel("the model", cp, Device::Cpu());
}

}  // namespace jobs
}  // namespace mt
