// Expert parallelism in the pretraining job (--expert_model_parallel_size): the flags' checks
// and the communicators of the expert-parallel and expert-data-parallel groups.
#ifndef MT_JOBS_PRETRAIN_EXPERT_PARALLEL_H_
#define MT_JOBS_PRETRAIN_EXPERT_PARALLEL_H_

#include <memory>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/parallel_context.h"
#include "jobs/pretrain/pretrain.h"

namespace mt {
namespace jobs {

// The expert-parallel degree against the DP size `dp` and the experts: InvalidArgument, one
// line.
absl::Status ValidateExpertParallel(const PretrainConfig& c, int dp);

// With ep_size > 1: *ep, ep_size consecutive DP ranks (same TP rank and stage; Megatron's
// layout), and *edp, the DP ranks at the same place in their EP groups (holding the same
// experts); nothing otherwise. Collective over `world`.
absl::Status CreateExpertGroups(int ep_size, const comm::ParallelContext& p,
                                comm::Communicator& world, std::unique_ptr<comm::Communicator>* ep,
                                std::unique_ptr<comm::Communicator>* edp);

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_PRETRAIN_EXPERT_PARALLEL_H_
