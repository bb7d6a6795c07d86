// Allocation and host <-> device copies for the code above core/ (comm/, nn/, models/, train/):
// every tensor it creates lives on the ExecContext's device (ExecContext::device), so the same
// module code runs on the CPU and on a GPU.
//
//   ASSIGN_OR_RETURN(Tensor scratch, Alloc(ctx, {n, h}, DType::kBF16));   // on ctx.device
//   ASSIGN_OR_RETURN(TensorView ids, OnDevice(ctx, host_ids, &staging, "tokens"));
//   ASSIGN_OR_RETURN(Tensor host, CopyToHost(ctx, device_loss));          // to read it
//
// Code that hands a tensor's bytes to the host (files, MPI, host-side initialisation) does so
// through HostStaging, which is the tensor itself in host memory and a copy otherwise, so that it
// need not know which device the tensor is on.
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

// True when the host may dereference t.data: the view is in host memory (a CPU tensor). What
// code that hands bytes to files or host libraries checks its views with. The overload answers
// for any memory on `device`.
bool InHostMemory(const TensorView& t);
bool InHostMemory(const Device& device);

// Sets every byte of `t` (contiguous, on any device) to zero, i.e. +0.0 or 0: a memset in host
// memory (in 1 MiB pieces over ctx.pool), ops::Fill on ctx.cuda_stream on a GPU. InvalidArgument
// for a non-contiguous view.
absl::Status SetZero(const ExecContext& ctx, const TensorView& t);

// The memory this process uses, for reports (Megatron's "memory (MB)" line): its resident set now
// and at its peak (VmRSS and VmHWM of /proc/self/status), and on a CUDA `device` the memory in use
// on it (cudaMemGetInfo: every process's; -1 for the CPU). Internal when /proc cannot be read;
// the errors of cudaMemGetInfo.
struct MemoryUsage {
  int64_t resident_bytes = 0, peak_resident_bytes = 0;
  int64_t device_in_use_bytes = -1;
};
absl::StatusOr<MemoryUsage> CurrentMemoryUsage(const Device& device);

// Returns once all work queued on ctx.device (on any stream) has finished; at once for the CPU.
absl::Status SynchronizeDevice(const ExecContext& ctx);

// dst [..., w] <- src[..., start : start + w] (the columns [start, start + w) of src's last
// dimension), both contiguous with the same leading dimensions, dtype and device. A memcpy per
// row in host memory; on a GPU one strided copy (cudaMemcpy2D) on the legacy default stream,
// ordered like the host copies above (the device is synchronized before and after when
// ctx.cuda_stream is set). InvalidArgument for views that do not fit (rank 0, other leading
// dimensions, dtypes or devices, a column range outside src).
absl::Status CopyLastDimSlice(const ExecContext& ctx, const TensorView& src, int64_t start,
                              const TensorView& dst);

// A host buffer through which code reads or writes the bytes of tensors that may live on a
// device: a tensor in host memory is used as it is; any other is copied through this buffer
// (CopyTensor, so synchronous, with the stream rules above). The buffer is reused across calls
// and shapes (it grows, never shrinks), so that a loop does not allocate once it has seen its
// largest tensor. A view it returns is valid until the next call on the same object. Move-only;
// not thread-safe.
//
//   ASSIGN_OR_RETURN(TensorView in, staging.Download(ctx, t));     // read t on the host
//   ASSIGN_OR_RETURN(TensorView out, staging.ForWriting(t));        // host memory for t's bytes
//   ... write out ...
//   RETURN_IF_ERROR(CopyTensor(ctx, out, t));                       // a no-op when out is t
class HostStaging {
 public:
  HostStaging() = default;
  HostStaging(HostStaging&&) = default;
  HostStaging& operator=(HostStaging&&) = default;

  // t's contents in host memory: t itself when InHostMemory(t), else a copy in this buffer.
  // InvalidArgument for a non-contiguous t; the errors of CopyTensor.
  absl::StatusOr<TensorView> Download(const ExecContext& ctx, const TensorView& t);
  // Host memory with t's shape and dtype to write t's new contents into: t itself when
  // InHostMemory(t), else this buffer (contents undefined). Publish what was written with
  // CopyTensor(ctx, view, t), which is a no-op for t itself. InvalidArgument for a non-contiguous
  // t; ResourceExhausted when the host is out of memory.
  absl::StatusOr<TensorView> ForWriting(const TensorView& t);

 private:
  // A host view with t's shape and dtype over buffer_, grown when too small.
  absl::StatusOr<TensorView> Stage(const TensorView& t);

  Buffer buffer_;
};

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
