#include "comm/parallel_context.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace mt {
namespace comm {

absl::Status ParallelConfig::Validate(int world_size, int num_attention_heads) const {
  const int tp = tensor_parallel;
  const int pp = pipeline_parallel;
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel config: world size ", world_size, " must be >= 1"));
  }
  if (tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel config: tensor-parallel degree ", tp, " must be >= 1"));
  }
  if (pp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel config: pipeline-parallel degree ", pp, " must be >= 1"));
  }
  if (pp > 1) {
    return absl::UnimplementedError(absl::StrCat("parallel config: pipeline parallelism (degree ",
                                                 pp, ") is not implemented; use 1"));
  }
  if (world_size % (tp * pp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel config: world size ", world_size, " is not divisible by tensor-parallel x ",
        "pipeline-parallel degree ", tp, " x ", pp, "; launch a multiple of ", tp * pp,
        " ranks or change the degrees"));
  }
  if (num_attention_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel config: the model's number of attention heads ", num_attention_heads,
                     " must be >= 1"));
  }
  if (tp > num_attention_heads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel config: tensor-parallel degree ", tp, " exceeds the model's ",
        num_attention_heads, " attention heads; every rank must hold at least one head"));
  }
  if (num_attention_heads % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel config: tensor-parallel degree ", tp, " does not divide the model's ",
        num_attention_heads, " attention heads; every rank must hold the same number of heads"));
  }
  return absl::OkStatus();
}

std::string ParallelConfig::DebugString() const {
  return absl::StrCat("tp=", tensor_parallel, " pp=", pipeline_parallel);
}

absl::StatusOr<ParallelLayout> MakeParallelLayout(int world_size, const ParallelConfig& config,
                                                  int num_attention_heads) {
  RETURN_IF_ERROR(config.Validate(world_size, num_attention_heads));
  ParallelLayout l;
  l.world_size = world_size;
  l.tp_size = config.tensor_parallel;
  l.dp_size = world_size / l.tp_size;
  l.tp_groups.assign(l.dp_size, {});
  l.dp_groups.assign(l.tp_size, {});
  for (int rank = 0; rank < world_size; ++rank) {
    l.tp_groups[l.TpGroupOf(rank)].push_back(rank);
    l.dp_groups[l.DpGroupOf(rank)].push_back(rank);
  }
  return l;
}

absl::StatusOr<std::unique_ptr<ParallelContext>> ParallelContext::Create(
    Communicator& world, const ParallelConfig& config, int num_attention_heads) {
  std::unique_ptr<ParallelContext> ctx(new ParallelContext());
  ctx->world_ = &world;
  ASSIGN_OR_RETURN(ctx->layout_, MakeParallelLayout(world.size(), config, num_attention_heads));
  const ParallelLayout& l = ctx->layout_;
  const int rank = world.rank();
  // Keys order each group by world rank, which is tp_rank (resp. dp_rank) order.
  ASSIGN_OR_RETURN(ctx->tp_, world.Split(l.TpGroupOf(rank), rank, "tp"));
  ASSIGN_OR_RETURN(ctx->dp_, world.Split(l.DpGroupOf(rank), rank, "dp"));
  if (ctx->tp_->size() != l.tp_size || ctx->tp_->rank() != l.TpRank(rank) ||
      ctx->dp_->size() != l.dp_size || ctx->dp_->rank() != l.DpRank(rank)) {
    return absl::InternalError(
        absl::StrCat("ParallelContext::Create: the backend split world rank ", rank, " into tp ",
                     ctx->tp_->rank(), "/", ctx->tp_->size(), " and dp ", ctx->dp_->rank(), "/",
                     ctx->dp_->size(), ", expected tp ", l.TpRank(rank), "/", l.tp_size, " and dp ",
                     l.DpRank(rank), "/", l.dp_size));
  }
  return ctx;
}

std::string ParallelContext::DebugString() const {
  const int r = rank();
  return absl::StrCat("rank ", r, " of ", world_size(), ": tp ", tp_rank(), " of ", tp_size(),
                      " (group [", absl::StrJoin(layout_.tp_groups[layout_.TpGroupOf(r)], ","),
                      "]), dp ", dp_rank(), " of ", dp_size(), " (group [",
                      absl::StrJoin(layout_.dp_groups[layout_.DpGroupOf(r)], ","), "])");
}

}  // namespace comm
}  // namespace mt
