// Argument checks shared by the tensor-parallel mappings (mappings.h) and the sequence-parallel
// ones (sequence_parallel.h), which split a full tensor into equal parts along one dimension, one
// per rank. Internal to comm/. Errors are InvalidArgument naming the op and the tensor.
#ifndef MT_COMM_REGION_CHECKS_H_
#define MT_COMM_REGION_CHECKS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace mt {
namespace comm {
namespace internal {

// "<mapping>::<direction>" ("GatherFromTensorParallelRegion::Forward"): the op in error messages.
std::string RegionOp(absl::string_view mapping, absl::string_view direction);

// 0 <= index < parts: "<op>: part index <index> is not in [0, <parts>)".
absl::Status CheckPartIndex(absl::string_view op, int index, int parts);

// parts >= 1; `full` and `part` contiguous, of one dtype and one device; `full` has dimension
// `axis` (from the front, or -1 for the last), divisible by `parts` (else "<op>: <axis_name> of
// <full_name> (...) is not divisible by the <parts> tensor-parallel ranks"); `part` has full's
// shape with that dimension divided by `parts`.
absl::Status CheckSplit(absl::string_view op, absl::string_view full_name, const TensorView& full,
                        absl::string_view part_name, const TensorView& part, int axis,
                        absl::string_view axis_name, int parts);

}  // namespace internal
}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_REGION_CHECKS_H_
