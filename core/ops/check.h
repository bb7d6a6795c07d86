// Argument checks at the op boundary. Every public op validates its views with these and returns
// InvalidArgument (bad shapes, non-contiguous views, mixed devices or dtypes, overlapping memory)
// or Unimplemented (a dtype or device the op does not support) with a message that names the op
// and the offending tensor: "<op>: <name> ...".
#ifndef MT_CORE_OPS_CHECK_H_
#define MT_CORE_OPS_CHECK_H_

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

// The float dtypes most ops accept.
inline constexpr std::initializer_list<DType> kFloatDTypes = {DType::kF32, DType::kBF16,
                                                              DType::kF16};

// A view and the name error messages give it ("x", "dy", "padding_mask"). Refers to the view,
// which must outlive it.
struct NamedView {
  absl::string_view name;
  const TensorView* view;
};

// ---- One tensor ----

// `t` is contiguous and non-null (unless empty).
absl::Status CheckContiguous(absl::string_view op, absl::string_view name, const TensorView& t);
// `t` has exactly this shape.
absl::Status CheckShape(absl::string_view op, absl::string_view name, const TensorView& t,
                        absl::Span<const int64_t> shape);
// `t` has rank `rank`.
absl::Status CheckRank(absl::string_view op, absl::string_view name, const TensorView& t, int rank);
// `t` has rank >= `min_rank`: "<op>: <name> (<t>) must have rank >= <min_rank>".
absl::Status CheckMinRank(absl::string_view op, absl::string_view name, const TensorView& t,
                          int min_rank);
// `t` has one of `dtypes` (Unimplemented otherwise: the op has no kernel for it).
absl::Status CheckDType(absl::string_view op, absl::string_view name, const TensorView& t,
                        std::initializer_list<DType> dtypes);
// `t` has exactly `dtype`, which the op prescribes (e.g. f32 statistics): InvalidArgument
// "<op>: <name> has dtype <t's>, expected <dtype>".
absl::Status CheckDTypeIs(absl::string_view op, absl::string_view name, const TensorView& t,
                          DType dtype);

// ---- One tensor against a reference tensor ----

// `t` lives on `ref`'s device: InvalidArgument
// "<op>: <t> is on <device>, expected <ref's device> (the device of <ref>)".
absl::Status CheckDeviceOf(absl::string_view op, const NamedView& t, const NamedView& ref);
// `t` has `ref`'s dtype: InvalidArgument
// "<op>: <t> has dtype <dtype>, expected <ref's dtype> (the dtype of <ref>)".
absl::Status CheckDTypeOf(absl::string_view op, const NamedView& t, const NamedView& ref);

// ---- Lists of operands ----

// Each of `ts`, in order: contiguous (CheckContiguous), of one of `dtypes` (CheckDType), on the
// device of the first (CheckDeviceOf). The first error is returned. `ts` must not be empty.
absl::Status CheckOperands(absl::string_view op, std::initializer_list<NamedView> ts,
                           std::initializer_list<DType> dtypes);
// Each of `ts`, in order: contiguous, of one of `dtypes`, on the device and of the dtype of `ref`
// (CheckDeviceOf, CheckDTypeOf), and of shape `shape` (CheckShape). `ref` need not be in `ts`.
absl::Status CheckMatching(absl::string_view op, const NamedView& ref,
                           std::initializer_list<NamedView> ts, std::initializer_list<DType> dtypes,
                           absl::Span<const int64_t> shape);
// The same with the first of `ts` as `ref` and its shape: operands of one device, dtype and shape
// (elementwise ops). `ts` must not be empty.
absl::Status CheckMatching(absl::string_view op, std::initializer_list<NamedView> ts,
                           std::initializer_list<DType> dtypes);

// ---- Memory ----

// Whether the bytes of two contiguous views intersect (never for an empty view).
bool Overlap(const TensorView& a, const TensorView& b);
// No output overlaps an input or another output: InvalidArgument
// "<op>: output <o> overlaps input <i>" or "<op>: outputs <o1> and <o2> overlap". Contiguous
// views (check them first). An output that is also meant to be read in place must not be listed
// among the inputs.
absl::Status CheckNoOverlap(absl::string_view op, std::initializer_list<NamedView> outputs,
                            std::initializer_list<NamedView> inputs);

// ---- Several tensors (unnamed) ----

// All tensors live on the same device as the first.
absl::Status CheckSameDevice(absl::string_view op, std::initializer_list<const TensorView*> ts);
// All tensors have the dtype of the first.
absl::Status CheckSameDType(absl::string_view op, std::initializer_list<const TensorView*> ts);

// Unimplemented("<op>: not implemented for <device>") for a device the op has no kernel for.
absl::Status UnsupportedDevice(absl::string_view op, const Device& device);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_CHECK_H_
