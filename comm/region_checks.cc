#include "comm/region_checks.h"

#include "absl/strings/str_cat.h"
#include "core/ops/check.h"
#include "core/status.h"

namespace mt {
namespace comm {
namespace internal {

std::string RegionOp(absl::string_view mapping, absl::string_view direction) {
  return absl::StrCat(mapping, "::", direction);
}

absl::Status CheckPartIndex(absl::string_view op, int index, int parts) {
  if (parts < 1 || index < 0 || index >= parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": part index ", index, " is not in [0, ", parts, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckSplit(absl::string_view op, absl::string_view full_name, const TensorView& full,
                        absl::string_view part_name, const TensorView& part, int axis,
                        absl::string_view axis_name, int parts) {
  if (parts < 1) return absl::InvalidArgumentError(absl::StrCat(op, ": ", parts, " parts"));
  RETURN_IF_ERROR(ops::CheckContiguous(op, full_name, full));
  RETURN_IF_ERROR(ops::CheckContiguous(op, part_name, part));
  RETURN_IF_ERROR(ops::CheckSameDType(op, {&full, &part}));
  RETURN_IF_ERROR(ops::CheckSameDevice(op, {&full, &part}));
  RETURN_IF_ERROR(ops::CheckMinRank(op, full_name, full, axis < 0 ? -axis : axis + 1));
  const int dim = axis < 0 ? full.rank() + axis : axis;
  if (full.shape[dim] % parts != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", axis_name, " of ", full_name, " (",
                                                   full.DebugString(), ") is not divisible by the ",
                                                   parts, " tensor-parallel ranks"));
  }
  Shape expected = full.shape;
  expected[dim] /= parts;
  return ops::CheckShape(op, part_name, part, expected);
}

}  // namespace internal
}  // namespace comm
}  // namespace mt
