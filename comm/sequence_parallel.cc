#include "comm/sequence_parallel.h"

#include <string>

#include "comm/region_checks.h"
#include "core/alloc.h"
#include "core/exec_context.h"
#include "core/status.h"

namespace mt {
namespace comm {

namespace {
constexpr char kScatter[] = "ScatterToSequenceParallelRegion";
constexpr char kGather[] = "GatherFromSequenceParallelRegion";
constexpr char kReduceScatter[] = "ReduceScatterToSequenceParallelRegion";

using internal::RegionOp;

// t [B, T, ...] as [B, T * ...] (contiguous, checked).
absl::StatusOr<TensorView> Rows(const TensorView& t) {
  return t.Reshape({t.dim(0), t.numel() / t.dim(0)});
}

// full [B, n t, ...] <- every rank's local [B, t, ...] along T: an all-gather along the last
// dimension of the [B, t * ...] views.
absl::Status AllGatherSequence(Communicator& tp, const TensorView& local, const TensorView& full) {
  ASSIGN_OR_RETURN(TensorView local2, Rows(local));
  ASSIGN_OR_RETURN(TensorView full2, Rows(full));
  return tp.AllGather(local2, full2, GatherAxis::kLast);
}

// local [B, t, ...] <- this rank's positions of the sum over ranks of full [B, n t, ...].
absl::Status ReduceScatterSequence(Communicator& tp, const TensorView& full,
                                   const TensorView& local) {
  const int n = tp.size();
  const int64_t B = full.dim(0), c = local.numel() / B;  // c: elements of one sample's slice.
  ASSIGN_OR_RETURN(TensorView local2, local.Reshape({B, c}));
  if (B == 1) {
    // Already rank-major: rank r's block is [r c, (r + 1) c).
    ASSIGN_OR_RETURN(TensorView full2, full.Reshape({n, c}));
    return tp.ReduceScatter(full2, local2, ReduceOp::kSum);
  }
  // Rank-major scratch [n * B, c]: rows [r B, (r + 1) B) are rank r's slices of every sample.
  ExecContext ec;
  ec.device = full.device;
  ASSIGN_OR_RETURN(Tensor scratch, Alloc(ec, {n * B, c}, full.dtype));
  ASSIGN_OR_RETURN(TensorView full2, full.Reshape({B, n * c}));
  const int64_t block_bytes = B * c * static_cast<int64_t>(DTypeSize(full.dtype));
  for (int r = 0; r < n; ++r) {
    const TensorView part(static_cast<char*>(scratch.data()) + r * block_bytes, {B, c}, full.dtype,
                          full.device);
    RETURN_IF_ERROR(CopyLastDimSlice(ec, full2, r * c, part));
  }
  return tp.ReduceScatter(scratch.view(), local2, ReduceOp::kSum);
}

// The mappings' directions that communicate: full [B, n t, ...] and local [B, t, ...] checked as
// `op` names them, then local all-gathered into full or full reduce-scattered into local.
enum class Move { kAllGather, kReduceScatter };
absl::Status Collective(Communicator& tp, const std::string& op, Move move,
                        absl::string_view full_name, const TensorView& full,
                        absl::string_view local_name, const TensorView& local) {
  RETURN_IF_ERROR(internal::CheckSplit(op, full_name, full, local_name, local, 1,
                                       "the sequence length", tp.size()));
  return move == Move::kAllGather ? AllGatherSequence(tp, local, full)
                                  : ReduceScatterSequence(tp, full, local);
}
}  // namespace

absl::Status SplitSequence(absl::string_view op, const TensorView& full, int index, int parts,
                           const TensorView& part) {
  RETURN_IF_ERROR(internal::CheckPartIndex(op, index, parts));
  RETURN_IF_ERROR(
      internal::CheckSplit(op, "full", full, "part", part, 1, "the sequence length", parts));
  ASSIGN_OR_RETURN(TensorView full2, Rows(full));
  ASSIGN_OR_RETURN(TensorView part2, Rows(part));
  return CopyLastDimSlice(ExecContext(), full2, index * part2.dim(1), part2);
}

absl::Status ScatterToSequenceParallelRegionForward(Communicator& tp, const TensorView& x,
                                                    const TensorView& y_local) {
  return SplitSequence(RegionOp(kScatter, "Forward"), x, tp.rank(), tp.size(), y_local);
}

absl::Status ScatterToSequenceParallelRegionBackward(Communicator& tp, const TensorView& dy_local,
                                                     const TensorView& dx) {
  return Collective(tp, RegionOp(kScatter, "Backward"), Move::kAllGather, "dx", dx, "dy_local",
                    dy_local);
}

absl::Status GatherFromSequenceParallelRegionForward(Communicator& tp, const TensorView& x_local,
                                                     const TensorView& y) {
  return Collective(tp, RegionOp(kGather, "Forward"), Move::kAllGather, "y", y, "x_local", x_local);
}

absl::Status GatherFromSequenceParallelRegionBackward(Communicator& tp, const TensorView& dy,
                                                      const TensorView& dx_local) {
  return Collective(tp, RegionOp(kGather, "Backward"), Move::kReduceScatter, "dy", dy, "dx_local",
                    dx_local);
}

absl::Status ReduceScatterToSequenceParallelRegionForward(Communicator& tp, const TensorView& x,
                                                          const TensorView& y_local) {
  return Collective(tp, RegionOp(kReduceScatter, "Forward"), Move::kReduceScatter, "x", x,
                    "y_local", y_local);
}

absl::Status ReduceScatterToSequenceParallelRegionBackward(Communicator& tp,
                                                           const TensorView& dy_local,
                                                           const TensorView& dx) {
  return Collective(tp, RegionOp(kReduceScatter, "Backward"), Move::kAllGather, "dx", dx,
                    "dy_local", dy_local);
}

}  // namespace comm
}  // namespace mt
