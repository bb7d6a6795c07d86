#include "core/ops/check.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mt {
namespace ops {

absl::Status CheckContiguous(absl::string_view op, absl::string_view name, const TensorView& t) {
  if (!t.IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " (", t.DebugString(), ") must be contiguous"));
  }
  if (t.data == nullptr && t.numel() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has no data"));
  }
  return absl::OkStatus();
}

absl::Status CheckShape(absl::string_view op, absl::string_view name, const TensorView& t,
                        absl::Span<const int64_t> shape) {
  if (absl::Span<const int64_t>(t.shape) != shape) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ",
                                                   ShapeToString(t.shape), ", expected ",
                                                   ShapeToString(shape)));
  }
  return absl::OkStatus();
}

absl::Status CheckRank(absl::string_view op, absl::string_view name, const TensorView& t,
                       int rank) {
  if (t.rank() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " has shape ",
                                                   ShapeToString(t.shape), " (rank ", t.rank(),
                                                   "), expected rank ", rank));
  }
  return absl::OkStatus();
}

absl::Status CheckDType(absl::string_view op, absl::string_view name, const TensorView& t,
                        std::initializer_list<DType> dtypes) {
  for (DType d : dtypes) {
    if (t.dtype == d) return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      op, ": ", name, " has unsupported dtype ", DTypeName(t.dtype), "; supported: ",
      absl::StrJoin(dtypes, ", ",
                    [](std::string* out, DType d) { absl::StrAppend(out, DTypeName(d)); })));
}

absl::Status CheckSameDevice(absl::string_view op, std::initializer_list<const TensorView*> ts) {
  const TensorView* first = *ts.begin();
  for (const TensorView* t : ts) {
    if (t->device != first->device) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": tensors on different devices (",
                                                     first->device.ToString(), " and ",
                                                     t->device.ToString(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSameDType(absl::string_view op, std::initializer_list<const TensorView*> ts) {
  const TensorView* first = *ts.begin();
  for (const TensorView* t : ts) {
    if (t->dtype != first->dtype) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": mixed dtypes (",
                                                     DTypeName(first->dtype), " and ",
                                                     DTypeName(t->dtype), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status UnsupportedDevice(absl::string_view op, const Device& device) {
  return absl::UnimplementedError(
      absl::StrCat(op, ": not implemented for ", device.ToString(),
                   device.is_cuda() ? " (CUDA kernels for this op come with the CUDA backend)" : ""));
}

}  // namespace ops
}  // namespace mt
