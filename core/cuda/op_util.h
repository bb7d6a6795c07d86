// Shared plumbing of the CUDA op implementations (ops_cuda.cc, gemm_cuda.cc, attention_cuda.cc,
// decoder_ops_cuda.cc); internal to core/cuda. Includes CUDA headers.
#ifndef MT_CORE_CUDA_OP_UTIL_H_
#define MT_CORE_CUDA_OP_UTIL_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/cuda/device_context.h"
#include "core/cuda/device_context_internal.h"
#include "core/cuda/launchers.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace cuda {
namespace internal {

struct Operand {
  absl::string_view name;
  const TensorView* t;  // Null: an absent optional operand, skipped.
};

enum class Needs { kNothing, kDeviceContext };

// An op's operands named as their variables are spelled: MT_OPERANDS(x, gamma, y, padding_mask)
// lists TensorViews, and pointers to them (null: an absent optional operand), for Enter.
#define MT_OPERANDS(...) ::mt::cuda::internal::Operands(#__VA_ARGS__, {__VA_ARGS__})

class Operands {
 public:
  // One view, or a pointer to one, of an MT_OPERANDS list.
  struct View {
    View(const TensorView& t) : t(&t) {}  // NOLINT(runtime/explicit): list elements.
    View(const TensorView* t) : t(t) {}   // NOLINT(runtime/explicit)
    const TensorView* t;
  };
  // `names`: the list's spelling, comma-separated, one name per view.
  Operands(absl::string_view names, std::initializer_list<View> views);
  absl::Span<const Operand> operands() const { return operands_; }

 private:
  absl::InlinedVector<Operand, 12> operands_;
};

// The entry check of every CUDA op: makes `device` current; Unimplemented ("<op>: not implemented
// for cuda:N here: no CUDA device ...") when the machine has no usable CUDA device,
// InvalidArgument for a device index it does not have; with kDeviceContext, FailedPrecondition
// without ctx.cuda and InvalidArgument when ctx.cuda serves another device; InvalidArgument for a
// non-empty operand whose memory is not on `device` (host memory, another GPU).
absl::Status Enter(absl::string_view op, const ExecContext& ctx, Device device,
                   absl::Span<const Operand> operands, Needs needs);
inline absl::Status Enter(absl::string_view op, const ExecContext& ctx, Device device,
                          std::initializer_list<Operand> operands, Needs needs) {
  return Enter(op, ctx, device, absl::MakeConstSpan(operands.begin(), operands.size()), needs);
}
inline absl::Status Enter(absl::string_view op, const ExecContext& ctx, Device device,
                          const Operands& operands, Needs needs) {
  return Enter(op, ctx, device, operands.operands(), needs);
}

// OK, or the launcher's failure as a Status naming the op, the source line and what to do.
absl::Status LaunchStatus(absl::string_view op, const LaunchResult& result);

// `status` with "<op>: " in front of its message.
absl::Status WithOp(absl::string_view op, const absl::Status& status);

// Copies `bytes` (at most kHostScratchBytes) from device memory to `host` through ctx.cuda's
// pinned buffer and waits for the stream.
absl::Status ReadBack(absl::string_view op, const ExecContext& ctx, const void* device_ptr,
                      size_t bytes, void* host);

inline cudaStream_t Stream(const ExecContext& ctx) {
  return static_cast<cudaStream_t>(ctx.cuda_stream);
}

// The launcher's element type of a float dtype (f32, bf16, f16).
ElemType Elem(DType dtype);
// The launcher's id type of an integer dtype (i32, i64).
IdType Id(DType dtype);

}  // namespace internal

// The helpers every host op file uses, by their short names in mt::cuda (where the op
// implementations live). This header is private to the CUDA backend's target (a source, not a
// public header), so nothing outside core/cuda sees them.
using internal::Elem;
using internal::Enter;
using internal::Id;
using internal::LaunchStatus;
using internal::Needs;
using internal::ReadBack;
using internal::Stream;
using internal::WithOp;

}  // namespace cuda
}  // namespace mt

// A CUDA runtime call inside an op: on failure, the call's Status with the op's name in front.
#define MT_OP_CUDA_CALL(op, expr)                                                \
  do {                                                                           \
    const cudaError_t mt_op_err_ = (expr);                                       \
    if (mt_op_err_ != cudaSuccess) {                                             \
      return ::mt::cuda::internal::WithOp(                                       \
          op, ::mt::cuda::CudaCallError(mt_op_err_, #expr, __FILE__, __LINE__)); \
    }                                                                            \
  } while (0)

#endif  // MT_CORE_CUDA_OP_UTIL_H_
