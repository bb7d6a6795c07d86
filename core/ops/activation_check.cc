#include "core/ops/activation_check.h"

#include "absl/strings/str_cat.h"
#include "core/ops/check.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace internal {
namespace {

absl::Status Mismatch(absl::string_view op, const NamedView& n, absl::string_view what,
                      absl::string_view got, absl::string_view want, absl::string_view whose) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", n.name, " ", what, " ", got,
                                                 ", expected ", want, " (that of ", whose, ")"));
}

}  // namespace

absl::Status CheckFloatActivations(absl::string_view op,
                                   std::initializer_list<NamedView> operands) {
  const NamedView& first = *operands.begin();
  for (const NamedView& n : operands) {
    RETURN_IF_ERROR(CheckContiguous(op, n.name, *n.t));
    RETURN_IF_ERROR(CheckDType(op, n.name, *n.t, {DType::kF32, DType::kBF16, DType::kF16}));
    if (n.t->device != first.t->device) {
      return Mismatch(op, n, "is on", n.t->device.ToString(), first.t->device.ToString(),
                      first.name);
    }
    if (n.t->dtype != first.t->dtype) {
      return Mismatch(op, n, "has dtype", DTypeName(n.t->dtype), DTypeName(first.t->dtype),
                      first.name);
    }
    if (n.t->shape != first.t->shape) {
      return Mismatch(op, n, "has shape", ShapeToString(n.t->shape), ShapeToString(first.t->shape),
                      first.name);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckF32Or(absl::string_view op, const NamedView& operand, DType dtype,
                        const Device& device) {
  RETURN_IF_ERROR(CheckContiguous(op, operand.name, *operand.t));
  if (operand.t->device != device) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", operand.name, " is on ",
                                                   operand.t->device.ToString(), ", expected ",
                                                   device.ToString()));
  }
  if (operand.t->dtype != DType::kF32 && operand.t->dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", operand.name, " has dtype ",
                                                   DTypeName(operand.t->dtype),
                                                   ", expected f32 or ", DTypeName(dtype)));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace ops
}  // namespace mt
