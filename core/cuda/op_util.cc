#include "core/cuda/op_util.h"

#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cuda_device.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace cuda {
namespace internal {
namespace {

// OK when the operand's memory is on `device` (or managed); otherwise says where it is.
absl::Status CheckPointer(absl::string_view op, const Operand& operand, Device device) {
  const TensorView& t = *operand.t;
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, t.data);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", operand.name, " (", t.DebugString(), ") is not a pointer CUDA knows (",
        cudaGetErrorString(err), "); allocate it with Tensor::Empty on ", device.ToString()));
  }
  if (attr.type == cudaMemoryTypeManaged) return absl::OkStatus();
  if (attr.type == cudaMemoryTypeDevice && attr.device == device.index) return absl::OkStatus();
  const std::string where =
      attr.type == cudaMemoryTypeDevice
          ? absl::StrCat("memory on cuda:", attr.device)
          : (attr.type == cudaMemoryTypeHost ? "pinned host memory" : "host memory");
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", operand.name, " (", t.DebugString(), ") points to ", where, ", not to memory on ",
      device.ToString(),
      "; copy it there (cuda::Memcpy) or label the view with the device its memory is on"));
}

}  // namespace

Operands::Operands(absl::string_view names, std::initializer_list<View> views) {
  for (absl::string_view name : absl::StrSplit(names, ',')) {
    operands_.push_back({absl::StripAsciiWhitespace(name), nullptr});
  }
  CHECK_EQ(operands_.size(), views.size()) << "MT_OPERANDS(" << names << ")";
  int i = 0;
  for (const View& v : views) operands_[i++].t = v.t;
}

absl::Status Enter(absl::string_view op, const ExecContext& ctx, Device device,
                   absl::Span<const Operand> operands, Needs needs) {
  int current = -1;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess && current != device.index) err = cudaSetDevice(device.index);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (DeviceCount() == 0) {
      return absl::UnimplementedError(
          absl::StrCat(op, ": not implemented for ", device.ToString(), " here: ", Describe(),
                       "; run on a machine with a CUDA GPU, or keep the tensors on the CPU"));
    }
    if (err == cudaErrorInvalidDevice) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", device.ToString(), " does not exist (", Describe(), ")"));
    }
    return WithOp(op, CudaCallError(err, "cudaSetDevice", __FILE__, __LINE__));
  }
  if (needs == Needs::kDeviceContext) {
    if (ctx.cuda == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          op, ": CUDA tensors need ctx.cuda, a mt::cuda::DeviceContext for ", device.ToString(),
          " (core/cuda/device_context.h); create one per device and stream with "
          "DeviceContext::Create and set it in the ExecContext"));
    }
    if (ctx.cuda->device() != device.index) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ctx.cuda serves cuda:", ctx.cuda->device(), ", but the tensors are",
                       " on ", device.ToString()));
    }
  }
  for (const Operand& operand : operands) {
    if (operand.t == nullptr || operand.t->numel() == 0) continue;
    RETURN_IF_ERROR(CheckPointer(op, operand, device));
  }
  return absl::OkStatus();
}

absl::Status LaunchStatus(absl::string_view op, const LaunchResult& result) {
  if (result.ok()) return absl::OkStatus();
  const auto err = static_cast<cudaError_t>(result.error);
  cudaGetLastError();
  const std::string what = absl::StrCat(op, ": CUDA error at ", result.file, ":", result.line, ": ",
                                        cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(
          absl::StrCat(what, "; the GPU is out of memory: reduce the batch size"));
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::FailedPreconditionError(
          absl::StrCat(what,
                       "; this binary has no kernels this GPU can run: add its architecture to "
                       "CUDA_GENCODE in tools/defs.bzl and rebuild (or update the driver)"));
    default:
      return absl::InternalError(
          absl::StrCat(what,
                       "; if it names an earlier asynchronous failure, rerun with "
                       "CUDA_LAUNCH_BLOCKING=1 to find the kernel that caused it"));
  }
}

absl::Status WithOp(absl::string_view op, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(op, ": ", status.message()));
}

absl::Status ReadBack(absl::string_view op, const ExecContext& ctx, const void* device_ptr,
                      size_t bytes, void* host) {
  DeviceContextState& st = ctx.cuda->state();
  if (bytes > kHostScratchBytes) {
    return absl::InternalError(absl::StrCat(op, ": reading back ", bytes, " bytes exceeds the ",
                                            kHostScratchBytes, "-byte pinned buffer"));
  }
  MT_OP_CUDA_CALL(
      op, cudaMemcpyAsync(st.host_scratch, device_ptr, bytes, cudaMemcpyDeviceToHost, Stream(ctx)));
  MT_OP_CUDA_CALL(op, cudaStreamSynchronize(Stream(ctx)));
  std::memcpy(host, st.host_scratch, bytes);
  return absl::OkStatus();
}

ElemType Elem(DType dtype) {
  return dtype == DType::kBF16 ? ElemType::kBF16
                               : (dtype == DType::kF16 ? ElemType::kF16 : ElemType::kF32);
}

IdType Id(DType dtype) { return dtype == DType::kI32 ? IdType::kI32 : IdType::kI64; }

}  // namespace internal
}  // namespace cuda
}  // namespace mt
