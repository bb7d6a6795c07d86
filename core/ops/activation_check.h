// The argument check shared by the row-wise and element-wise ops of the modern decoder blocks
// (rmsnorm.h, rope.h, swiglu.h). Internal to core/ops.
#ifndef MT_CORE_OPS_ACTIVATION_CHECK_H_
#define MT_CORE_OPS_ACTIVATION_CHECK_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace mt {
namespace ops {
namespace internal {

struct NamedView {
  absl::string_view name;
  const TensorView* t;
};

// Every operand is contiguous, of a float dtype (f32, bf16, f16; Unimplemented otherwise) and has
// the dtype, shape and device of the first (InvalidArgument naming the operand otherwise).
absl::Status CheckFloatActivations(absl::string_view op, std::initializer_list<NamedView> operands);

// `t` is contiguous, on `device`, and either f32 or of `dtype`; InvalidArgument otherwise.
absl::Status CheckF32Or(absl::string_view op, const NamedView& operand, DType dtype,
                        const Device& device);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ACTIVATION_CHECK_H_
