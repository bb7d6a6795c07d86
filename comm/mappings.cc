#include "comm/mappings.h"

#include "comm/region_checks.h"
#include "core/alloc.h"
#include "core/exec_context.h"
#include "core/ops/check.h"
#include "core/status.h"

namespace mt {
namespace comm {

namespace {
constexpr char kF[] = "CopyToTensorParallelRegion";
constexpr char kG[] = "ReduceFromTensorParallelRegion";
constexpr char kGather[] = "GatherFromTensorParallelRegion";
constexpr char kScatter[] = "ScatterToTensorParallelRegion";

using internal::RegionOp;

// full [..., T*c] <- every rank's local [..., c] along the last dimension, checked as the split of
// full over the T = tp.size() ranks.
absl::Status AllGatherLastDim(Communicator& tp, absl::string_view op, absl::string_view local_name,
                              const TensorView& local, absl::string_view full_name,
                              const TensorView& full) {
  RETURN_IF_ERROR(internal::CheckSplit(op, full_name, full, local_name, local, -1,
                                       "the last dimension", tp.size()));
  return tp.AllGather(local, full, GatherAxis::kLast);
}
}  // namespace

absl::Status SplitLastDim(absl::string_view op, const TensorView& full, int index, int parts,
                          const TensorView& part) {
  RETURN_IF_ERROR(internal::CheckPartIndex(op, index, parts));
  RETURN_IF_ERROR(
      internal::CheckSplit(op, "full", full, "part", part, -1, "the last dimension", parts));
  // The mappings take no context: on a GPU the copy runs on the legacy default stream.
  return CopyLastDimSlice(ExecContext(), full, index * part.dim(-1), part);
}

absl::Status CopyToTensorParallelRegionForward(Communicator& tp, const TensorView& x) {
  return ops::CheckContiguous(RegionOp(kF, "Forward"), "x", x);
}

absl::Status CopyToTensorParallelRegionBackward(Communicator& tp, const TensorView& dx) {
  RETURN_IF_ERROR(ops::CheckContiguous(RegionOp(kF, "Backward"), "dx", dx));
  return tp.AllReduce(dx, ReduceOp::kSum);
}

absl::Status ReduceFromTensorParallelRegionForward(Communicator& tp, const TensorView& y) {
  RETURN_IF_ERROR(ops::CheckContiguous(RegionOp(kG, "Forward"), "y", y));
  return tp.AllReduce(y, ReduceOp::kSum);
}

absl::Status ReduceFromTensorParallelRegionBackward(Communicator& tp, const TensorView& dy) {
  return ops::CheckContiguous(RegionOp(kG, "Backward"), "dy", dy);
}

absl::Status GatherFromTensorParallelRegionForward(Communicator& tp, const TensorView& x_local,
                                                   const TensorView& y) {
  return AllGatherLastDim(tp, RegionOp(kGather, "Forward"), "x_local", x_local, "y", y);
}

absl::Status GatherFromTensorParallelRegionBackward(Communicator& tp, const TensorView& dy,
                                                    const TensorView& dx_local) {
  return SplitLastDim(RegionOp(kGather, "Backward"), dy, tp.rank(), tp.size(), dx_local);
}

absl::Status ScatterToTensorParallelRegionForward(Communicator& tp, const TensorView& x,
                                                  const TensorView& y_local) {
  return SplitLastDim(RegionOp(kScatter, "Forward"), x, tp.rank(), tp.size(), y_local);
}

absl::Status ScatterToTensorParallelRegionBackward(Communicator& tp, const TensorView& dy_local,
                                                   const TensorView& dx) {
  return AllGatherLastDim(tp, RegionOp(kScatter, "Backward"), "dy_local", dy_local, "dx", dx);
}

}  // namespace comm
}  // namespace mt
