#include "core/ops/check.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "glog/logging.h"

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

absl::Status CheckMinRank(absl::string_view op, absl::string_view name, const TensorView& t,
                          int min_rank) {
  if (t.rank() < min_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " (", t.DebugString(), ") must have rank >= ", min_rank));
  }
  return absl::OkStatus();
}

absl::Status CheckDType(absl::string_view op, absl::string_view name, const TensorView& t,
                        std::initializer_list<DType> dtypes) {
  for (DType d : dtypes) {
    if (t.dtype == d) return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat(op, ": ", name, " has unsupported dtype ", DTypeName(t.dtype),
                   "; supported: ", absl::StrJoin(dtypes, ", ", [](std::string* out, DType d) {
                     absl::StrAppend(out, DTypeName(d));
                   })));
}

absl::Status CheckDTypeIs(absl::string_view op, absl::string_view name, const TensorView& t,
                          DType dtype) {
  if (t.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", name, " has dtype ", DTypeName(t.dtype), ", expected ", DTypeName(dtype)));
  }
  return absl::OkStatus();
}

absl::Status CheckDeviceOf(absl::string_view op, const NamedView& t, const NamedView& ref) {
  if (t.view->device != ref.view->device) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", t.name, " is on ", t.view->device.ToString(), ", expected ",
                     ref.view->device.ToString(), " (the device of ", ref.name, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckDTypeOf(absl::string_view op, const NamedView& t, const NamedView& ref) {
  if (t.view->dtype != ref.view->dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", t.name, " has dtype ", DTypeName(t.view->dtype), ", expected ",
                     DTypeName(ref.view->dtype), " (the dtype of ", ref.name, ")"));
  }
  return absl::OkStatus();
}

namespace {

// Contiguous, of one of `dtypes`, on `ref`'s device: what every operand of a list must be.
absl::Status CheckOperand(absl::string_view op, const NamedView& t, const NamedView& ref,
                          std::initializer_list<DType> dtypes) {
  RETURN_IF_ERROR(CheckContiguous(op, t.name, *t.view));
  RETURN_IF_ERROR(CheckDType(op, t.name, *t.view, dtypes));
  return CheckDeviceOf(op, t, ref);
}

}  // namespace

absl::Status CheckOperands(absl::string_view op, std::initializer_list<NamedView> ts,
                           std::initializer_list<DType> dtypes) {
  CHECK(ts.size() > 0) << op << ": no operands";
  for (const NamedView& t : ts) RETURN_IF_ERROR(CheckOperand(op, t, *ts.begin(), dtypes));
  return absl::OkStatus();
}

absl::Status CheckMatching(absl::string_view op, const NamedView& ref,
                           std::initializer_list<NamedView> ts, std::initializer_list<DType> dtypes,
                           absl::Span<const int64_t> shape) {
  for (const NamedView& t : ts) {
    RETURN_IF_ERROR(CheckOperand(op, t, ref, dtypes));
    RETURN_IF_ERROR(CheckDTypeOf(op, t, ref));
    RETURN_IF_ERROR(CheckShape(op, t.name, *t.view, shape));
  }
  return absl::OkStatus();
}

absl::Status CheckMatching(absl::string_view op, std::initializer_list<NamedView> ts,
                           std::initializer_list<DType> dtypes) {
  CHECK(ts.size() > 0) << op << ": no operands";
  const NamedView& first = *ts.begin();
  return CheckMatching(op, first, ts, dtypes, first.view->shape);
}

bool Overlap(const TensorView& a, const TensorView& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const char* pa = static_cast<const char*>(a.data);
  const char* pb = static_cast<const char*>(b.data);
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

absl::Status CheckNoOverlap(absl::string_view op, std::initializer_list<NamedView> outputs,
                            std::initializer_list<NamedView> inputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (const NamedView& x : inputs) {
      if (Overlap(*o->view, *x.view)) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": output ", o->name, " overlaps input ", x.name));
      }
    }
    for (auto o2 = o + 1; o2 != outputs.end(); ++o2) {
      if (Overlap(*o->view, *o2->view)) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": outputs ", o->name, " and ", o2->name, " overlap"));
      }
    }
  }
  return absl::OkStatus();
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
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": mixed dtypes (", DTypeName(first->dtype), " and ", DTypeName(t->dtype), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status UnsupportedDevice(absl::string_view op, const Device& device) {
  return absl::UnimplementedError(absl::StrCat(
      op, ": not implemented for ", device.ToString(),
      device.is_cuda() ? " (CUDA kernels for this op come with the CUDA backend)" : ""));
}

}  // namespace ops
}  // namespace mt
