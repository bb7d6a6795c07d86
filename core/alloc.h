// Allocation and host <-> device copies for the code above core/ (nn/, models/, train/): every
// tensor it creates lives on the ExecContext's device (ExecContext::device), so the same module
// code runs on the CPU and on a GPU.
//
//   ASSIGN_OR_RETURN(Tensor scratch, Alloc(ctx, {n, h}, DType::kBF16));   // on ctx.device
//   ASSIGN_OR_RETURN(TensorView ids, OnDevice(ctx, host_ids, &staging, "tokens"));
//   ASSIGN_OR_RETURN(Tensor host, CopyToHost(ctx, device_loss));          // to read it
//
// Streams: copies between the host and a GPU are synchronous cuda::Memcpy calls on the legacy
// default stream, which orders them after the kernels already queued on ctx.cuda_stream when that
// is the default stream or a blocking stream (as comm/ assumes too). When ctx.cuda_stream is not
// null, the device is also synchronized before and after each such copy, so that a non-blocking
// stream is safe as well. Copies between two views on one GPU are queued on ctx.cuda_stream.
//
// Errors: ResourceExhausted when the device is out of memory, Unimplemented for CUDA in CPU-only
// builds (or on a machine without a GPU), InvalidArgument for views that do not fit the call
// (named in the message), Internal for other CUDA failures.
#ifndef MT_CORE_ALLOC_H_
#define MT_CORE_ALLOC_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {

// An uninitialised contiguous tensor on ctx.device.
absl::StatusOr<Tensor> Alloc(const ExecContext& ctx, Shape shape, DType dtype);
// The same with every byte zero (memset on the CPU; ops::Fill on ctx.cuda_stream on CUDA), i.e.
// +0.0 for float dtypes and 0 for integer ones.
absl::StatusOr<Tensor> AllocZeros(const ExecContext& ctx, Shape shape, DType dtype);

// dst <- src, byte for byte. Both contiguous with the same dtype and number of elements (shapes
// may differ), each on the CPU or a CUDA device: CPU -> CPU is a memcpy, host <-> CUDA a
// synchronous copy, CUDA -> the same CUDA device a copy on ctx.cuda_stream (ops::Convert; integer
// dtypes: a cuda::Memcpy on the default stream, as host copies).
// src and dst must not partially overlap (identical views are a no-op). InvalidArgument for
// views that do not fit (or two different GPUs).
absl::Status CopyTensor(const ExecContext& ctx, const TensorView& src, const TensorView& dst);

// A copy of `src` (any device) in host memory, e.g. to read a loss or write a checkpoint.
absl::StatusOr<Tensor> CopyToHost(const ExecContext& ctx, const TensorView& src);
// A copy of `src` (any device) on ctx.device.
absl::StatusOr<Tensor> CopyToDevice(const ExecContext& ctx, const TensorView& src);

// `t` readable by the host: `t` itself when it is in host memory, else a copy in *staging
// (reallocated only when its shape or dtype differ). For the small things the host must look at
// (labels to count, ids to check). InvalidArgument, naming `what`, for a non-contiguous `t`.
absl::StatusOr<TensorView> OnHost(const ExecContext& ctx, const TensorView& t, Tensor* staging,
                                  absl::string_view what);

// `t` where ctx's ops can use it: `t` itself when it already lives on ctx.device; a host `t` with
// a CUDA ctx is uploaded into *staging (reallocated only when its shape, dtype or device differ,
// so that steady-state steps do not allocate) and a view of it is returned. The returned view is
// valid while *staging (or t) is. InvalidArgument, naming `what`, for a non-contiguous `t` or one
// on another device (a CUDA tensor with a CPU ctx, or another GPU).
absl::StatusOr<TensorView> OnDevice(const ExecContext& ctx, const TensorView& t, Tensor* staging,
                                    absl::string_view what);

}  // namespace mt

#endif  // MT_CORE_ALLOC_H_
