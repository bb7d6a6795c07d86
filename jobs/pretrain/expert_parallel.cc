#include "jobs/pretrain/expert_parallel.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mt {
namespace jobs {

absl::Status ValidateExpertParallel(const PretrainConfig& c, int dp) {
  const int ep = c.expert_model_parallel_size;
  if (ep < 1 || dp % ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert_model_parallel_size ", ep, " must be >= 1 and divide the data-parallel size ", dp,
        " (world / (tensor_model_parallel_size x pipeline_model_parallel_size))"));
  }
  if (ep > 1 && (c.model.num_experts < 1 || c.model.num_experts % ep != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("expert_model_parallel_size ", ep,
                                                   " must divide num_experts ", c.model.num_experts,
                                                   " (a model with experts: --model=moe-tiny)"));
  }
  return absl::OkStatus();
}

absl::Status CreateExpertGroups(int ep_size, const comm::ParallelContext& p,
                                comm::Communicator& world, std::unique_ptr<comm::Communicator>* ep,
                                std::unique_ptr<comm::Communicator>* edp) {
  if (ep_size <= 1) return absl::OkStatus();
  const int color =
      p.tp_rank() + p.tp_size() * (p.dp_rank() / ep_size + (p.dp_size() / ep_size) * p.pp_rank());
  ASSIGN_OR_RETURN(*ep, world.Split(color, p.dp_rank() % ep_size, "ep"));
  const int edp_color = p.tp_rank() + p.tp_size() * (p.dp_rank() % ep_size + ep_size * p.pp_rank());
  ASSIGN_OR_RETURN(*edp, world.Split(edp_color, p.dp_rank() / ep_size, "edp"));
  return absl::OkStatus();
}

}  // namespace jobs
}  // namespace mt
