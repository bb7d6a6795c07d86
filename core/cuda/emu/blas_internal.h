// cuBLAS and cuBLASLt for the CUDA emulator (--config=cuda_emu): the functions the project calls
// (core/cuda/gemm_cuda.cc, device_context.cc), defined with their real C names and signatures so
// that the CUDA host code links against them instead of libcublas / libcublasLt. This header holds
// what their files share; internal to //core/cuda/emu:blas.
//
//   blas_math.cc       the product and its epilogues (float accumulation, rounding, GeLU), the
//                      element types, alignment, the device-memory checks on each matrix
//   blas_legacy.cc     cuBLAS: handles, status names, cublasGemmStridedBatchedEx
//   blas_lt_desc.cc    cuBLASLt: the handle, matmul descriptors, matrix layouts, preferences
//   blas_lt_matmul.cc  cuBLASLt: problem checks, cublasLtMatmulAlgoGetHeuristic, cublasLtMatmul
//
// Semantics follow NVIDIA's documentation (the cuBLAS guide and the doc comments of cublasLt.h),
// not the callers, so that a caller's misuse shows up here:
//   - Matrices are column-major: element (i, j) of a layout {rows, cols, ld} is at i + j * ld, and
//     matrix b of a batch starts `b * stride` elements after the first (STRIDED_BATCH_OFFSET).
//   - D = alpha op(A) op(B) + beta C, D being rows x cols of its layout, op(A) m x k, op(B) k x n.
//     C is not read when beta is 0 (as in BLAS), nor A and B when alpha is 0 or k is 0.
//   - Epilogues: BIAS adds bias[i] (one entry per row of D, same type as D) to row i; GELU applies
//     the tanh-form GeLU; GELU_AUX also stores its input (after the bias) into the aux matrix of
//     D's type, rows x cols with EPILOGUE_AUX_LD; batch b of the bias and aux starts
//     BIAS_BATCH_STRIDE / EPILOGUE_AUX_BATCH_STRIDE elements further.
//   - Types: CUBLAS_COMPUTE_32F with CUDA_R_32F scaling (alpha and beta are host floats), A and B
//     of one type among f32, f16, bf16, C and D of that type or (for f16, bf16) f32.
// What the library refuses with a status, this emulation refuses with the same status (argument
// checks: INVALID_VALUE; type combinations without a kernel: NOT_SUPPORTED). Every attribute or
// value it does not implement is refused with CUBLAS_STATUS_INVALID_VALUE, so that a new use is
// loud instead of silently ignored. What would be undefined on a GPU (a matrix that is not device
// memory or runs past its allocation, a pointer less aligned than the algorithm was chosen for)
// stops the process with a message (internal.h Fail).
//
// Numerics: inputs are widened to float, each output element accumulated in float in order of k,
// alpha, beta, the bias and the GeLU applied in float, and every stored value rounded once (to
// nearest even) to its type. Streams are synchronous and the workspace is not used: the one
// algorithm the heuristic returns needs none.
#ifndef MT_CORE_CUDA_EMU_BLAS_INTERNAL_H_
#define MT_CORE_CUDA_EMU_BLAS_INTERNAL_H_

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mt {
namespace cuda_emu {

// ---- Handles and descriptors.

// A new T behind *handle (the Create functions): INVALID_VALUE for a null handle pointer.
template <typename T, typename Handle>
cublasStatus_t Create(Handle* handle, T** object = nullptr) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  T* p = new T();
  *handle = reinterpret_cast<Handle>(p);
  if (object != nullptr) *object = p;
  return CUBLAS_STATUS_SUCCESS;
}

// Deletes a library handle (cublasDestroy, cublasLtDestroy): NOT_INITIALIZED for a null one.
template <typename Handle>
cublasStatus_t DestroyHandle(Handle handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt descriptors (blas_lt_desc.cc creates them, blas_lt_matmul.cc reads them).

// Tags that tell our descriptor structs apart (a layout passed as a matmul descriptor, say).
constexpr uint64_t kDescTag = 0x4d54454d55444553ull;    // "MTEMUDES"
constexpr uint64_t kLayoutTag = 0x4d54454d554c4159ull;  // "MTEMULAY"
constexpr uint64_t kPrefTag = 0x4d54454d55505246ull;    // "MTEMUPRF"
constexpr uint64_t kAlgoTag = 0x4d54454d55414c47ull;    // "MTEMUALG"

// The most alignment (bytes) any cuBLASLt requirement names.
constexpr uint64_t kMaxAlignment = 256;

struct MatmulDesc {
  uint64_t tag = kDescTag;
  int32_t compute_type = 0;
  int32_t scale_type = 0;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N;
  int32_t trans_b = CUBLAS_OP_N;
  int32_t trans_c = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t bias_batch_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int64_t aux_batch_stride = 0;
  int32_t aux_type = -1;   // -1: D's type
  int32_t bias_type = -1;  // -1: D's type
};

struct Layout {
  uint64_t tag = kLayoutTag;
  uint32_t type = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};

struct Preference {
  uint64_t tag = kPrefTag;
  uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t max_workspace = 0;
  uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  uint32_t align_a = kMaxAlignment;
  uint32_t align_b = kMaxAlignment;
  uint32_t align_c = kMaxAlignment;
  uint32_t align_d = kMaxAlignment;
  float max_waves = 0.0f;
  uint64_t impl_mask = ~uint64_t{0};
};

// Our struct behind a handle, or null when the handle is null or another kind.
inline MatmulDesc* AsDesc(cublasLtMatmulDesc_t d) {
  auto* p = reinterpret_cast<MatmulDesc*>(d);
  return p != nullptr && p->tag == kDescTag ? p : nullptr;
}
inline const Layout* AsLayout(cublasLtMatrixLayout_t l) {
  const auto* p = reinterpret_cast<const Layout*>(l);
  return p != nullptr && p->tag == kLayoutTag ? p : nullptr;
}
inline Layout* AsMutableLayout(cublasLtMatrixLayout_t l) {
  auto* p = reinterpret_cast<Layout*>(l);
  return p != nullptr && p->tag == kLayoutTag ? p : nullptr;
}
inline Preference* AsPref(cublasLtMatmulPreference_t p) {
  auto* q = reinterpret_cast<Preference*>(p);
  return q != nullptr && q->tag == kPrefTag ? q : nullptr;
}

// ---- The product (blas_math.cc).

// Bytes of an element of CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF; 0 for any other type.
size_t TypeSize(int type);

// Whether CUBLAS_COMPUTE_32F (CUDA_R_32F scaling) multiplies A and B of `ab` into C and D of
// `cd` (the cuBLAS guide's type tables for cublasLtMatmul and cublasGemmEx).
bool SupportedTypes(int ab, int cd);

// The largest power of two (at most kMaxAlignment) dividing the address and, for a batch, the
// batch stride in bytes: the alignment every matrix of the batch has.
uint64_t Alignment(const void* p, int64_t batch, int64_t stride_bytes);

// One operand as the product reads or writes it.
struct Matrix {
  const void* data = nullptr;
  int type = 0;
  int64_t ld = 0;
  int64_t stride = 0;  // elements from one matrix of the batch to the next
};

struct Epilogue {
  bool bias = false;
  bool gelu = false;
  bool aux = false;
  const void* bias_data = nullptr;
  int64_t bias_stride = 0;
  void* aux_data = nullptr;
  int64_t aux_ld = 0;
  int64_t aux_stride = 0;
  int type = 0;  // of the bias and the aux matrix
};

// Stops the process unless the `rows` x `cols` matrices of a batch lie inside one device
// allocation (a GPU would fault on anything else).
void CheckDeviceMatrix(const char* function, const char* name, const void* data, int type,
                       int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride);

// D = alpha op(A) op(B) + beta C, then the epilogue, for every matrix of the batch. op(A) is m x k,
// op(B) k x n, C and D m x n. Device memory must be accessible (DeviceAccess).
void Compute(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t batch,
             float alpha, const Matrix& a, const Matrix& b, float beta, const Matrix& c, void* d,
             const Matrix& d_layout, const Epilogue& ep);

}  // namespace cuda_emu
}  // namespace mt

#endif  // MT_CORE_CUDA_EMU_BLAS_INTERNAL_H_
