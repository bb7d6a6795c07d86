// CUDA build of DeviceContext: the cuBLASLt handle, workspace, scratch and pinned host buffer.
#include "core/cuda/device_context.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda/device_context_internal.h"
#include "core/cuda_device.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace cuda {
namespace internal {

absl::Status CublasCallError(cublasStatus_t status, const char* expr, const char* file, int line) {
  const std::string where =
      absl::StrCat(file, ":", line, ": ", expr, " failed: ", cublasGetStatusName(status), " (",
                   cublasGetStatusString(status), ")");
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat(where, "; the GPU is out of memory: reduce the batch size"));
  }
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH) {
    return absl::UnimplementedError(
        absl::StrCat(where,
                     "; this GPU or cuBLASLt version does not support the requested GEMM "
                     "(dtype, alignment or shape)"));
  }
  return absl::InternalError(absl::StrCat(
      where, "; check the cuBLAS installation matches the toolkit this binary was built with"));
}

GemmPlan::~GemmPlan() {
  if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
  if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
  if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
  if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
}

DeviceContextState::~DeviceContextState() {
  // Work queued with this context may still use the buffers: wait for it. Errors cannot be
  // returned from a destructor; log them.
  if (cudaSetDevice(device) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    LOG(ERROR) << "DeviceContext for cuda:" << device << ": synchronizing before release failed: "
               << cudaGetErrorString(cudaGetLastError());
  }
  gemm_plans.clear();
  if (blas != nullptr) cublasLtDestroy(blas);
  if (blas_legacy != nullptr) cublasDestroy(blas_legacy);
  if (workspace != nullptr) cudaFree(workspace);
  if (scratch != nullptr) cudaFree(scratch);
  if (host_scratch != nullptr) cudaFreeHost(host_scratch);
}

absl::StatusOr<void*> DeviceContextState::Scratch(size_t nbytes) {
  if (nbytes <= scratch_bytes && scratch != nullptr) return scratch;
  // Grow geometrically (and to at least 1 MiB) so that a sequence of growing requests does not
  // free and reallocate every time.
  size_t want = scratch_bytes * 2;
  if (want < nbytes) want = nbytes;
  if (want < (size_t{1} << 20)) want = size_t{1} << 20;
  MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  if (scratch != nullptr) {
    MT_CUDA_RETURN_IF_ERROR(cudaFree(scratch));  // Synchronizes: queued users are done.
    scratch = nullptr;
    scratch_bytes = 0;
  }
  MT_CUDA_RETURN_IF_ERROR(cudaMalloc(&scratch, want));
  scratch_bytes = want;
  return scratch;
}

}  // namespace internal

DeviceContext::DeviceContext(int device, std::unique_ptr<internal::DeviceContextState> state)
    : device_(device), state_(std::move(state)) {}

DeviceContext::~DeviceContext() = default;

absl::StatusOr<std::unique_ptr<DeviceContext>> DeviceContext::Create(int device,
                                                                     const Options& options) {
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("DeviceContext: cuda:", device, " does not exist (", Describe(),
                     "); pick a device in [0, ", count, ") or run on the CPU"));
  }
  auto state = std::make_unique<internal::DeviceContextState>();
  state->device = device;
  MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&state->blas));
  MT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&state->blas_legacy));
  if (options.gemm_workspace_bytes > 0) {
    MT_CUDA_RETURN_IF_ERROR(cudaMalloc(&state->workspace, options.gemm_workspace_bytes));
    state->workspace_bytes = options.gemm_workspace_bytes;
  }
  MT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&state->host_scratch, internal::kHostScratchBytes));
  return std::unique_ptr<DeviceContext>(new DeviceContext(device, std::move(state)));
}

size_t DeviceContext::gemm_plans() const { return state_->gemm_plans.size(); }

size_t DeviceContext::scratch_bytes() const { return state_->scratch_bytes; }

}  // namespace cuda
}  // namespace mt
