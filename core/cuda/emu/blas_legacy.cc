// The emulated cuBLAS (legacy API) calls: handles, status names and cublasGemmStridedBatchedEx
// (blas_internal.h has the semantics).
#include <cublas_v2.h>

#include <algorithm>

#include "core/cuda/emu/blas_internal.h"
#include "core/cuda/emu/internal.h"

// The handle the header declares only as an incomplete type.
struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace mt {
namespace cuda_emu {
namespace {

const char* StatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* StatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success (emulated)";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized (emulated)";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "a resource allocation failed (emulated)";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an unsupported value or parameter was passed (emulated)";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "the device lacks a required architectural feature (emulated)";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed (emulated)";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute (emulated)";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed (emulated)";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported (emulated)";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "the functionality requested requires a license (emulated)";
  }
  return "unknown cuBLAS status (emulated)";
}

}  // namespace
}  // namespace cuda_emu
}  // namespace mt

namespace emu = ::mt::cuda_emu;

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  return emu::Create<cublasContext>(handle);
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) { return emu::DestroyHandle(handle); }

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) { return emu::StatusName(status); }

const char* cublasGetStatusString(cublasStatus_t status) { return emu::StatusString(status); }

// The cuBLAS guide's cublasGemmStridedBatchedEx: for every i < batchCount,
// C_i = alpha op(A_i) op(B_i) + beta C_i, X_i = X + i * strideX, column-major, alpha and beta host
// pointers to the compute type's scalar (float for CUBLAS_COMPUTE_32F).
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  using emu::Matrix;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto valid_op = [](cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
  };
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 || !valid_op(transa) || !valid_op(transb)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool trans_a = transa != CUBLAS_OP_N, trans_b = transb != CUBLAS_OP_N;
  if (lda < std::max(1, trans_a ? k : m) || ldb < std::max(1, trans_b ? n : k) ||
      ldc < std::max(1, m) || alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool known_algo =
      (algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
      (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
  if (!known_algo) return CUBLAS_STATUS_INVALID_VALUE;
  if (computeType != CUBLAS_COMPUTE_32F || Atype != Btype || !emu::SupportedTypes(Atype, Ctype)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  // Host pointer mode (the handle's default; cublasSetPointerMode is not emulated).
  const float alpha_v = *static_cast<const float*>(alpha);
  const float beta_v = *static_cast<const float*>(beta);
  const bool product = k > 0 && alpha_v != 0.0f;
  const char* fn = "cublasGemmStridedBatchedEx";
  if (product) {
    emu::CheckDeviceMatrix(fn, "A", A, Atype, trans_a ? k : m, trans_a ? m : k, lda, batchCount,
                           strideA);
    emu::CheckDeviceMatrix(fn, "B", B, Btype, trans_b ? n : k, trans_b ? k : n, ldb, batchCount,
                           strideB);
  }
  emu::CheckDeviceMatrix(fn, "C", C, Ctype, m, n, ldc, batchCount, strideC);
  emu::DeviceAccess access;
  const Matrix a{A, Atype, lda, strideA}, b{B, Btype, ldb, strideB}, c{C, Ctype, ldc, strideC};
  emu::Compute(trans_a, trans_b, m, n, k, batchCount, alpha_v, a, b, beta_v, c, C, c,
               emu::Epilogue());
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
