// Argument checks at the op boundary. Every public op validates its views with these and returns
// InvalidArgument (bad shapes, non-contiguous views, mixed devices) or Unimplemented (a dtype or
// device the op does not support) with a message that names the op and the offending tensor.
#ifndef MT_CORE_OPS_CHECK_H_
#define MT_CORE_OPS_CHECK_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

// `t` is contiguous and non-null (unless empty).
absl::Status CheckContiguous(absl::string_view op, absl::string_view name, const TensorView& t);
// `t` has exactly this shape.
absl::Status CheckShape(absl::string_view op, absl::string_view name, const TensorView& t,
                        absl::Span<const int64_t> shape);
// `t` has rank `rank`.
absl::Status CheckRank(absl::string_view op, absl::string_view name, const TensorView& t,
                       int rank);
// `t` has one of `dtypes` (Unimplemented otherwise).
absl::Status CheckDType(absl::string_view op, absl::string_view name, const TensorView& t,
                        std::initializer_list<DType> dtypes);
// All tensors live on the same device as the first.
absl::Status CheckSameDevice(absl::string_view op, std::initializer_list<const TensorView*> ts);
// All tensors have the dtype of the first.
absl::Status CheckSameDType(absl::string_view op, std::initializer_list<const TensorView*> ts);
// Unimplemented("<op>: not implemented for <device>") for a device the op has no kernel for.
absl::Status UnsupportedDevice(absl::string_view op, const Device& device);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_CHECK_H_
