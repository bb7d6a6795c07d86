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
  const int cp = context_parallel;
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
  if (cp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel config: context-parallel degree ", cp, " must be >= 1"));
  }
  if (world_size % (tp * cp * pp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel config: world size ", world_size, " is not divisible by tensor-parallel x ",
        "context-parallel x pipeline-parallel degree ", tp, " x ", cp, " x ", pp,
        "; launch a multiple of ", tp * cp * pp, " ranks or change the degrees"));
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
  return absl::StrCat("tp=", tensor_parallel, " cp=", context_parallel, " pp=", pipeline_parallel);
}

absl::Status ValidateContextParallelSequence(int context_parallel, int64_t seq_length,
                                             int tensor_parallel, bool sequence_parallel) {
  const int cp = context_parallel;
  if (cp < 1 || seq_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat("context parallelism: --context_parallel_size ",
                                                   cp, " and --seq_length ", seq_length,
                                                   " must both be >= 1"));
  }
  if (cp == 1) return absl::OkStatus();
  if (seq_length % (2 * cp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context parallelism: --seq_length ", seq_length, " does not split into 2 x ",
        "--context_parallel_size = ", 2 * cp, " chunks of equal length (rank i holds chunks i ",
        "and ", 2 * cp - 1, "-i); use a multiple of ", 2 * cp));
  }
  const int64_t chunk = seq_length / (2 * cp);
  if (sequence_parallel && chunk % tensor_parallel != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context parallelism: with --sequence_parallel each of the ", 2 * cp, " chunks of ", chunk,
        " positions must divide over --tensor_model_parallel_size ", tensor_parallel,
        "; use a --seq_length that is a multiple of ", 2 * cp * tensor_parallel));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParallelLayout> MakeParallelLayout(int world_size, const ParallelConfig& config,
                                                  int num_attention_heads) {
  RETURN_IF_ERROR(config.Validate(world_size, num_attention_heads));
  ParallelLayout l;
  l.world_size = world_size;
  l.tp_size = config.tensor_parallel;
  l.pp_size = config.pipeline_parallel;
  l.cp_size = config.context_parallel;
  l.dp_size = world_size / (l.tp_size * l.cp_size * l.pp_size);
  l.tp_groups.assign(l.cp_size * l.dp_size * l.pp_size, {});
  l.cp_groups.assign(l.tp_size * l.dp_size * l.pp_size, {});
  l.dp_groups.assign(l.tp_size * l.cp_size * l.pp_size, {});
  l.dp_cp_groups.assign(l.tp_size * l.pp_size, {});
  l.pp_groups.assign(l.tp_size * l.cp_size * l.dp_size, {});
  // Ranks ascend, and within each group so do cp_rank, dp_rank and pp_rank: pushing in rank order
  // lists every group in its own rank order.
  for (int rank = 0; rank < world_size; ++rank) {
    l.tp_groups[l.TpGroupOf(rank)].push_back(rank);
    l.cp_groups[l.CpGroupOf(rank)].push_back(rank);
    l.dp_groups[l.DpGroupOf(rank)].push_back(rank);
    l.dp_cp_groups[l.DpCpGroupOf(rank)].push_back(rank);
    l.pp_groups[l.PpGroupOf(rank)].push_back(rank);
  }
  return l;
}

std::vector<int> ParallelLayout::EmbeddingGroupOf(int rank) const {
  const std::vector<int>& pipeline = pp_groups[PpGroupOf(rank)];
  const int stage = PpRank(rank);
  if (pp_size == 1 || (stage != 0 && stage != pp_size - 1)) return {rank};
  return {pipeline.front(), pipeline.back()};
}

absl::StatusOr<PipelineSplit> MakePipelineSplit(int num_layers, int pipeline_parallel,
                                                int layers_per_virtual_stage) {
  const int pp = pipeline_parallel;
  if (num_layers < 1 || pp < 1 || layers_per_virtual_stage < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline split: need num_layers >= 1 (got ", num_layers,
        "), pipeline-parallel degree >= 1 (got ", pp,
        ") and num_layers_per_virtual_pipeline_stage >= 0 (got ", layers_per_virtual_stage, ")"));
  }
  if (num_layers % pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline split: --num_layers=", num_layers, " does not divide into ", pp,
        " pipeline stages (--pipeline_model_parallel_size); every stage must hold the same "
        "number of layers"));
  }
  PipelineSplit split;
  split.num_layers = num_layers;
  split.stages = pp;
  if (layers_per_virtual_stage == 0) return split;
  const int per_stage = num_layers / pp;
  if (pp < 2 || per_stage % layers_per_virtual_stage != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline split: --num_layers_per_virtual_pipeline_stage=", layers_per_virtual_stage,
        " needs --pipeline_model_parallel_size >= 2 (got ", pp, ") and must divide the ", per_stage,
        " layers of each stage"));
  }
  split.virtual_stages = per_stage / layers_per_virtual_stage;
  return split;
}

absl::StatusOr<std::unique_ptr<ParallelContext>> ParallelContext::Create(
    Communicator& world, const ParallelConfig& config, int num_attention_heads) {
  std::unique_ptr<ParallelContext> ctx(new ParallelContext());
  ctx->world_ = &world;
  ASSIGN_OR_RETURN(ctx->layout_, MakeParallelLayout(world.size(), config, num_attention_heads));
  const ParallelLayout& l = ctx->layout_;
  const int rank = world.rank();
  // Keys order each group by world rank, which is tp_rank (resp. dp_rank, pp_rank) order.
  ASSIGN_OR_RETURN(ctx->tp_, world.Split(l.TpGroupOf(rank), rank, "tp"));
  ASSIGN_OR_RETURN(ctx->cp_, world.Split(l.CpGroupOf(rank), rank, "cp"));
  ASSIGN_OR_RETURN(ctx->dp_, world.Split(l.DpGroupOf(rank), rank, "dp"));
  // DP x CP is the DP group itself at CP = 1 (dp_cp() returns it; no second communicator).
  if (l.cp_size > 1) {
    ASSIGN_OR_RETURN(ctx->dp_cp_, world.Split(l.DpCpGroupOf(rank), rank, "dp_cp"));
  }
  ASSIGN_OR_RETURN(ctx->pp_, world.Split(l.PpGroupOf(rank), rank, "pp"));
  // An embedding group is named by its first stage's rank, a singleton by its own rank.
  ASSIGN_OR_RETURN(ctx->embedding_,
                   world.Split(l.EmbeddingGroupOf(rank).front(), rank, "embedding"));
  const int emb_size = static_cast<int>(l.EmbeddingGroupOf(rank).size());
  if (ctx->cp_->size() != l.cp_size || ctx->cp_->rank() != l.CpRank(rank) ||
      ctx->dp_cp().size() != l.cp_size * l.dp_size) {
    return absl::InternalError(absl::StrCat(
        "ParallelContext::Create: the backend split world rank ", rank, " into cp ",
        ctx->cp_->rank(), "/", ctx->cp_->size(), " and a DP x CP group of ", ctx->dp_cp().size(),
        ", expected cp ", l.CpRank(rank), "/", l.cp_size, " and ", l.cp_size * l.dp_size));
  }
  if (ctx->tp_->size() != l.tp_size || ctx->tp_->rank() != l.TpRank(rank) ||
      ctx->dp_->size() != l.dp_size || ctx->dp_->rank() != l.DpRank(rank) ||
      ctx->pp_->size() != l.pp_size || ctx->pp_->rank() != l.PpRank(rank) ||
      ctx->embedding_->size() != emb_size) {
    return absl::InternalError(
        absl::StrCat("ParallelContext::Create: the backend split world rank ", rank, " into tp ",
                     ctx->tp_->rank(), "/", ctx->tp_->size(), ", dp ", ctx->dp_->rank(), "/",
                     ctx->dp_->size(), ", pp ", ctx->pp_->rank(), "/", ctx->pp_->size(),
                     " and an embedding group of ", ctx->embedding_->size(), ", expected tp ",
                     l.TpRank(rank), "/", l.tp_size, ", dp ", l.DpRank(rank), "/", l.dp_size,
                     ", pp ", l.PpRank(rank), "/", l.pp_size, " and ", emb_size));
  }
  return ctx;
}

std::string ParallelContext::DebugString() const {
  const int r = rank();
  const std::string cp =
      cp_size() == 1
          ? ""
          : absl::StrCat(", cp ", cp_rank(), " of ", cp_size(), " (group [",
                         absl::StrJoin(layout_.cp_groups[layout_.CpGroupOf(r)], ","), "])");
  return absl::StrCat("rank ", r, " of ", world_size(), ": tp ", tp_rank(), " of ", tp_size(),
                      " (group [", absl::StrJoin(layout_.tp_groups[layout_.TpGroupOf(r)], ","),
                      "])", cp, ", dp ", dp_rank(), " of ", dp_size(), " (group [",
                      absl::StrJoin(layout_.dp_groups[layout_.DpGroupOf(r)], ","), "]), pp ",
                      pp_rank(), " of ", pp_size(), " (group [",
                      absl::StrJoin(layout_.pp_groups[layout_.PpGroupOf(r)], ","), "])");
}

}  // namespace comm
}  // namespace mt
