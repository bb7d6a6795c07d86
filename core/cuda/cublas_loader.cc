// cuBLAS and cuBLASLt, loaded on first use. The binaries do not link the two libraries: every
// cuBLAS(Lt) function the project calls is defined here with its real name and forwards to the
// library, which is opened (dlopen) the first time one is called. Loading libcublasLt runs its
// static initializers, about a quarter of a second of CPU time and a few hundred page faults,
// which every process of a CUDA build paid at start when it was linked, even a `--help` or a
// CPU-only run (docs/perf/training.md, "The build and the start of a process").
//
// Where: the library's soname first (LD_LIBRARY_PATH, the loader's cache: what a GPU machine
// with its own CUDA libraries sets up), then the toolkit the build used. If it cannot be loaded,
// every call returns CUBLAS_STATUS_NOT_INITIALIZED and cublasGetStatusString names the library
// and dlerror()'s reason, which the callers' error messages carry.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#define MT_STR2(x) #x
#define MT_STR(x) MT_STR2(x)

namespace {

constexpr const char* kCublasLt = "libcublasLt.so." MT_STR(CUBLAS_VER_MAJOR);
constexpr const char* kCublas = "libcublas.so." MT_STR(CUBLAS_VER_MAJOR);

struct Libraries {
  void* lt = nullptr;
  void* blas = nullptr;
  std::string error;  // why loading failed; empty when both are loaded
};

void* Open(const char* soname, std::string* error) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  const std::string first = dlerror();
  const std::string in_toolkit = std::string(MT_CUDA_LIB_DIR) + "/" + soname;
  handle = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr && error->empty()) {
    *error = "cannot load " + std::string(soname) + " (" + first + "; nor " + in_toolkit + ")";
  }
  return handle;
}

const Libraries& Load() {
  static const Libraries* const libs = [] {
    auto* l = new Libraries();
    l->lt = Open(kCublasLt, &l->error);
    if (l->lt != nullptr) l->blas = Open(kCublas, &l->error);
    return l;
  }();
  return *libs;
}

// The library function `name`, or null when the library or the symbol is missing.
void* Resolve(bool lt, const char* name) {
  const Libraries& libs = Load();
  void* handle = lt ? libs.lt : libs.blas;
  return handle != nullptr ? dlsym(handle, name) : nullptr;
}

using StatusText = const char* (*)(cublasStatus_t);

// libcublas's status function `name`, or libcublasLt's `lt_name` when only that one could be
// loaded (its errors are then the ones reported); null when neither resolves.
StatusText ResolveStatusText(const char* name, const char* lt_name) {
  auto f = reinterpret_cast<StatusText>(Resolve(false, name));
  return f != nullptr ? f : reinterpret_cast<StatusText>(Resolve(true, lt_name));
}

}  // namespace

// Forwards one function: `name` with the parameters `params` (as declared in the header, which
// makes the compiler check them) passes `args` to the library's `name`.
#define MT_FORWARD(lt, name, params, args)                           \
  cublasStatus_t name params {                                       \
    using Fn = cublasStatus_t(*) params;                             \
    static const auto fn = reinterpret_cast<Fn>(Resolve(lt, #name)); \
    if (fn == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;         \
    return fn args;                                                  \
  }

extern "C" {

const char* cublasGetStatusName(cublasStatus_t status) {
  static const StatusText fn = ResolveStatusText("cublasGetStatusName", "cublasLtGetStatusName");
  return fn != nullptr ? fn(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  static const StatusText fn =
      ResolveStatusText("cublasGetStatusString", "cublasLtGetStatusString");
  const std::string& error = Load().error;
  if (!error.empty()) return error.c_str();  // Why a library is missing, whatever the status.
  return fn != nullptr ? fn(status) : "cublasGetStatusString not found in the library";
}

MT_FORWARD(false, cublasCreate_v2, (cublasHandle_t * handle), (handle))
MT_FORWARD(false, cublasDestroy_v2, (cublasHandle_t handle), (handle))
MT_FORWARD(false, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream),
           (handle, stream))
MT_FORWARD(false, cublasGemmStridedBatchedEx,
           (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
            int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
            long long int strideA, const void* B, cudaDataType Btype, int ldb,
            long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
            long long int strideC, int batchCount, cublasComputeType_t computeType,
            cublasGemmAlgo_t algo),
           (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
            beta, C, Ctype, ldc, strideC, batchCount, computeType, algo))

MT_FORWARD(true, cublasLtCreate, (cublasLtHandle_t * lightHandle), (lightHandle))
MT_FORWARD(true, cublasLtDestroy, (cublasLtHandle_t lightHandle), (lightHandle))
MT_FORWARD(true, cublasLtMatmulDescCreate,
           (cublasLtMatmulDesc_t * matmulDesc, cublasComputeType_t computeType,
            cudaDataType_t scaleType),
           (matmulDesc, computeType, scaleType))
MT_FORWARD(true, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t matmulDesc), (matmulDesc))
MT_FORWARD(true, cublasLtMatmulDescSetAttribute,
           (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void* buf,
            size_t sizeInBytes),
           (matmulDesc, attr, buf, sizeInBytes))
MT_FORWARD(true, cublasLtMatrixLayoutCreate,
           (cublasLtMatrixLayout_t * matLayout, cudaDataType type, uint64_t rows, uint64_t cols,
            int64_t ld),
           (matLayout, type, rows, cols, ld))
MT_FORWARD(true, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t matLayout), (matLayout))
MT_FORWARD(true, cublasLtMatrixLayoutSetAttribute,
           (cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
            size_t sizeInBytes),
           (matLayout, attr, buf, sizeInBytes))
MT_FORWARD(true, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
MT_FORWARD(true, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
MT_FORWARD(true, cublasLtMatmulPreferenceSetAttribute,
           (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
            const void* buf, size_t sizeInBytes),
           (pref, attr, buf, sizeInBytes))
MT_FORWARD(true, cublasLtMatmulAlgoGetHeuristic,
           (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
            cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
            cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
            cublasLtMatmulPreference_t preference, int requestedAlgoCount,
            cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount),
           (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
            heuristicResultsArray, returnAlgoCount))
MT_FORWARD(true, cublasLtMatmul,
           (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
            const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
            cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
            cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
            const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
            cudaStream_t stream),
           (lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
            workspace, workspaceSizeInBytes, stream))

}  // extern "C"
