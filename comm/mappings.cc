#include "comm/mappings.h"

#include "absl/strings/str_cat.h"
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

std::string Label(absl::string_view mapping, absl::string_view direction) {
  return absl::StrCat(mapping, "::", direction);
}
}  // namespace

absl::Status SplitLastDim(absl::string_view op, const TensorView& full, int index, int parts,
                          const TensorView& part) {
  RETURN_IF_ERROR(ops::CheckContiguous(op, "full", full));
  RETURN_IF_ERROR(ops::CheckContiguous(op, "part", part));
  RETURN_IF_ERROR(ops::CheckSameDType(op, {&full, &part}));
  RETURN_IF_ERROR(ops::CheckSameDevice(op, {&full, &part}));
  if (parts < 1 || index < 0 || index >= parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": part index ", index, " is not in [0, ", parts, ")"));
  }
  if (full.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": full (", full.DebugString(), ") must have rank >= 1"));
  }
  if (full.dim(-1) % parts != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": last dimension of full (",
                                                   full.DebugString(), ") is not divisible by the ",
                                                   parts, " tensor-parallel ranks"));
  }
  Shape expected = full.shape;
  expected.back() /= parts;
  RETURN_IF_ERROR(ops::CheckShape(op, "part", part, expected));
  // The mappings take no context: on a GPU the copy runs on the legacy default stream.
  return CopyLastDimSlice(ExecContext(), full, index * part.dim(-1), part);
}

absl::Status CopyToTensorParallelRegionForward(Communicator& tp, const TensorView& x) {
  return ops::CheckContiguous(Label(kF, "Forward"), "x", x);
}

absl::Status CopyToTensorParallelRegionBackward(Communicator& tp, const TensorView& dx) {
  RETURN_IF_ERROR(ops::CheckContiguous(Label(kF, "Backward"), "dx", dx));
  return tp.AllReduce(dx, ReduceOp::kSum);
}

absl::Status ReduceFromTensorParallelRegionForward(Communicator& tp, const TensorView& y) {
  RETURN_IF_ERROR(ops::CheckContiguous(Label(kG, "Forward"), "y", y));
  return tp.AllReduce(y, ReduceOp::kSum);
}

absl::Status ReduceFromTensorParallelRegionBackward(Communicator& tp, const TensorView& dy) {
  return ops::CheckContiguous(Label(kG, "Backward"), "dy", dy);
}

absl::Status GatherFromTensorParallelRegionForward(Communicator& tp, const TensorView& x_local,
                                                   const TensorView& y) {
  const std::string op = Label(kGather, "Forward");
  RETURN_IF_ERROR(ops::CheckContiguous(op, "x_local", x_local));
  RETURN_IF_ERROR(ops::CheckContiguous(op, "y", y));
  if (x_local.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": x_local (", x_local.DebugString(), ") must have rank >= 1"));
  }
  Shape expected = x_local.shape;
  expected.back() *= tp.size();
  RETURN_IF_ERROR(ops::CheckShape(op, "y", y, expected));
  return tp.AllGather(x_local, y, GatherAxis::kLast);
}

absl::Status GatherFromTensorParallelRegionBackward(Communicator& tp, const TensorView& dy,
                                                    const TensorView& dx_local) {
  return SplitLastDim(Label(kGather, "Backward"), dy, tp.rank(), tp.size(), dx_local);
}

absl::Status ScatterToTensorParallelRegionForward(Communicator& tp, const TensorView& x,
                                                  const TensorView& y_local) {
  return SplitLastDim(Label(kScatter, "Forward"), x, tp.rank(), tp.size(), y_local);
}

absl::Status ScatterToTensorParallelRegionBackward(Communicator& tp, const TensorView& dy_local,
                                                   const TensorView& dx) {
  const std::string op = Label(kScatter, "Backward");
  RETURN_IF_ERROR(ops::CheckContiguous(op, "dy_local", dy_local));
  RETURN_IF_ERROR(ops::CheckContiguous(op, "dx", dx));
  if (dy_local.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dy_local (", dy_local.DebugString(), ") must have rank >= 1"));
  }
  Shape expected = dy_local.shape;
  expected.back() *= tp.size();
  RETURN_IF_ERROR(ops::CheckShape(op, "dx", dx, expected));
  return tp.AllGather(dy_local, dx, GatherAxis::kLast);
}

}  // namespace comm
}  // namespace mt
