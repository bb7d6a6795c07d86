// Internals of DeviceContext and the checked-call macros for CUDA host code in core/cuda. Includes
// CUDA and cuBLASLt headers: include only from core/cuda sources compiled in CUDA builds.
#ifndef MT_CORE_CUDA_DEVICE_CONTEXT_INTERNAL_H_
#define MT_CORE_CUDA_DEVICE_CONTEXT_INTERNAL_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cuda_error.h"
#include "core/gemm_shape.h"

namespace mt {
namespace cuda {
namespace internal {

// The Status of a failed cuBLAS / cuBLASLt call, as CudaCallError (core/cuda_error.h) is for the
// CUDA runtime.
absl::Status CublasCallError(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace internal
}  // namespace cuda
}  // namespace mt

#define MT_CUBLAS_RETURN_IF_ERROR(expr)                                                           \
  do {                                                                                            \
    const cublasStatus_t mt_cublas_status_ = (expr);                                              \
    if (mt_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                             \
      return ::mt::cuda::internal::CublasCallError(mt_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                             \
  } while (0)

namespace mt {
namespace cuda {
namespace internal {

// One GEMM shape as cuBLASLt sees it (after the row-major -> column-major swap of A and B) and
// the alignment of its pointers, which restricts the kernels cuBLASLt may pick; with a fused
// epilogue, also the epilogue, the bias dtype and the alignment of the bias and aux (GeLU input)
// pointers.
struct GemmPlanKey : GemmShape {
  int dtype;    // cudaDataType_t of A and B.
  int c_dtype;  // cudaDataType_t of C (A's, or f32).
  int align_a, align_b, align_c;
  int epilogue = 1;                   // cublasLtEpilogue_t; CUBLASLT_EPILOGUE_DEFAULT (1): none.
  int bias_dtype = -1;                // cudaDataType_t of the bias; -1: no bias.
  int align_bias = 0, align_aux = 0;  // 0: no such pointer.
  bool operator<(const GemmPlanKey& o) const {
    return std::tie(dtype, c_dtype, batch, m, n, k, trans_a, trans_b, align_a, align_b, align_c,
                    epilogue, bias_dtype, align_bias, align_aux) <
           std::tie(o.dtype, o.c_dtype, o.batch, o.m, o.n, o.k, o.trans_a, o.trans_b, o.align_a,
                    o.align_b, o.align_c, o.epilogue, o.bias_dtype, o.align_bias, o.align_aux);
  }
};

// Descriptors and the chosen algorithm for one key; destroys its descriptors. When cuBLASLt has
// no algorithm for the shape and alignment (or refuses it at run time), `legacy` routes the
// product to cublasGemmStridedBatchedEx, which takes any shape and alignment; for a key with an
// epilogue, to a product without one followed by the BiasAdd and Gelu kernels.
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool legacy = false;
  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan();
};

// Bytes of the pinned host buffer.
constexpr size_t kHostScratchBytes = 4096;

struct DeviceContextState {
  int device = 0;
  cublasLtHandle_t blas = nullptr;
  cublasHandle_t blas_legacy = nullptr;  // The fallback of GemmPlan::legacy.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  void* host_scratch = nullptr;  // kHostScratchBytes of pinned memory.
  std::map<GemmPlanKey, std::unique_ptr<GemmPlan>> gemm_plans;

  DeviceContextState() = default;
  DeviceContextState(const DeviceContextState&) = delete;
  DeviceContextState& operator=(const DeviceContextState&) = delete;
  ~DeviceContextState();

  // Device scratch of at least nbytes (256-byte aligned), valid until the next call. Growing frees
  // the old buffer, which synchronizes the device (cudaFree), so queued kernels finish with it.
  absl::StatusOr<void*> Scratch(size_t nbytes);
};

}  // namespace internal
}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_DEVICE_CONTEXT_INTERNAL_H_
