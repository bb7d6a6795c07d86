// cuBLAS and cuBLASLt for the CUDA emulator (--config=cuda_emu): the functions the project calls
// (core/cuda/gemm_cuda.cc, device_context.cc), defined with their real C names and signatures so
// that the CUDA host code links against them instead of libcublas / libcublasLt.
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
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cuda/emu/internal.h"

// The handles the headers declare only as incomplete types.
struct cublasContext {
  cudaStream_t stream = nullptr;
};
struct cublasLtContext {
  int device = 0;
};

namespace mt {
namespace cuda_emu {
namespace {

// Tags that tell our descriptor structs apart (a layout passed as a matmul descriptor, say).
constexpr uint64_t kDescTag = 0x4d54454d55444553ull;    // "MTEMUDES"
constexpr uint64_t kLayoutTag = 0x4d54454d554c4159ull;  // "MTEMULAY"
constexpr uint64_t kPrefTag = 0x4d54454d55505246ull;    // "MTEMUPRF"
constexpr uint64_t kAlgoTag = 0x4d54454d55414c47ull;    // "MTEMUALG"

// The most alignment (bytes) any cuBLASLt requirement names.
constexpr uint64_t kMaxAlignment = 256;
// cublasLtMatmul's workspace must be 256-byte aligned.
constexpr uintptr_t kWorkspaceAlignment = 256;
// The GeLU aux matrix's leading dimension and batch stride must be multiples of this.
constexpr int64_t kAuxMultiple = 8;

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

// What the heuristic's algorithm records in cublasLtMatmulAlgo_t::data: the problem it was chosen
// for and the alignments it may assume.
enum AlgoField {
  kAlgoTagField = 0,
  kAlgoKind,  // PackKind(): types, transposes, epilogue
  kAlgoAlignA,
  kAlgoAlignB,
  kAlgoAlignC,
  kAlgoAlignD,
  kAlgoAlignBias,
  kAlgoAlignAux,
};
static_assert(kAlgoAlignAux < sizeof(cublasLtMatmulAlgo_t::data) / sizeof(uint64_t),
              "cublasLtMatmulAlgo_t too small");

MatmulDesc* AsDesc(cublasLtMatmulDesc_t d) {
  auto* p = reinterpret_cast<MatmulDesc*>(d);
  return p != nullptr && p->tag == kDescTag ? p : nullptr;
}
const Layout* AsLayout(cublasLtMatrixLayout_t l) {
  const auto* p = reinterpret_cast<const Layout*>(l);
  return p != nullptr && p->tag == kLayoutTag ? p : nullptr;
}
Layout* AsMutableLayout(cublasLtMatrixLayout_t l) {
  auto* p = reinterpret_cast<Layout*>(l);
  return p != nullptr && p->tag == kLayoutTag ? p : nullptr;
}
Preference* AsPref(cublasLtMatmulPreference_t p) {
  auto* q = reinterpret_cast<Preference*>(p);
  return q != nullptr && q->tag == kPrefTag ? q : nullptr;
}

// Reads an attribute value of exactly sizeof(V) bytes (the headers' size check).
template <typename V>
bool ReadAttribute(const void* buf, size_t size, V* out) {
  if (buf == nullptr || size != sizeof(V)) return false;
  std::memcpy(out, buf, sizeof(V));
  return true;
}

size_t TypeSize(int type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    default:
      return 0;
  }
}

// Whether CUBLAS_COMPUTE_32F (CUDA_R_32F scaling) multiplies A and B of `ab` into C and D of
// `cd` (the cuBLAS guide's type tables for cublasLtMatmul and cublasGemmEx).
bool SupportedTypes(int ab, int cd) {
  if (ab == CUDA_R_32F) return cd == CUDA_R_32F;
  if (ab == CUDA_R_16F || ab == CUDA_R_16BF) return cd == ab || cd == CUDA_R_32F;
  return false;
}

float Load(const void* base, int type, int64_t i) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[i];
    case CUDA_R_16F:
      return __half2float(static_cast<const __half*>(base)[i]);
    default:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
}

void Store(void* base, int type, int64_t i, float v) {
  switch (type) {
    case CUDA_R_32F:
      static_cast<float*>(base)[i] = v;
      break;
    case CUDA_R_16F:
      static_cast<__half*>(base)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
      break;
  }
}

// The tanh form of GeLU: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
float Gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x)));
}

// The largest power of two (at most 256) dividing the address and, for a batch, the batch stride
// in bytes: the alignment every matrix of the batch has.
uint64_t Alignment(const void* p, int64_t batch, int64_t stride_bytes) {
  uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) | kMaxAlignment;
  if (batch > 1) bits |= static_cast<uint64_t>(stride_bytes);
  return bits & (~bits + 1);
}

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
                       int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  if (rows == 0 || cols == 0 || batch == 0) return;
  const int64_t last = (batch - 1) * stride;
  const int64_t lo = std::min<int64_t>(0, last);
  const int64_t hi = std::max<int64_t>(0, last) + (cols - 1) * ld + rows;
  const int64_t elem = static_cast<int64_t>(TypeSize(type));
  const char* begin = static_cast<const char*>(data) + lo * elem;
  if (data == nullptr || !IsDeviceRange(begin, static_cast<size_t>((hi - lo) * elem))) {
    Fail(
        "%s: %s (%p: batch %lld of %lld x %lld, ld %lld, batch stride %lld, %lld-byte "
        "elements) is not device memory or runs past its cudaMalloc allocation",
        function, name, data, static_cast<long long>(batch), static_cast<long long>(rows),
        static_cast<long long>(cols), static_cast<long long>(ld), static_cast<long long>(stride),
        static_cast<long long>(elem));
  }
}

// D = alpha op(A) op(B) + beta C, then the epilogue, for every matrix of the batch. op(A) is m x k,
// op(B) k x n, C and D m x n. Device memory must be accessible (DeviceAccess).
void Compute(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t batch,
             float alpha, const Matrix& a, const Matrix& b, float beta, const Matrix& c, void* d,
             const Matrix& d_layout, const Epilogue& ep) {
  if (m == 0 || n == 0) return;
  const bool product = k > 0 && alpha != 0.0f;
  // op(A) column-major (element (i, p) at i + p * m) and op(B) column-major (p + j * k), in
  // float, so that the inner loop runs over contiguous i.
  std::vector<float> op_a(product ? static_cast<size_t>(m * k) : 0);
  std::vector<float> op_b(product ? static_cast<size_t>(k * n) : 0);
  std::vector<float> acc(static_cast<size_t>(m));
  for (int64_t bi = 0; bi < batch; ++bi) {
    if (product) {
      const void* a_data =
          static_cast<const char*>(a.data) + bi * a.stride * static_cast<int64_t>(TypeSize(a.type));
      const void* b_data =
          static_cast<const char*>(b.data) + bi * b.stride * static_cast<int64_t>(TypeSize(b.type));
      for (int64_t p = 0; p < k; ++p) {
        for (int64_t i = 0; i < m; ++i) {
          op_a[p * m + i] = Load(a_data, a.type, trans_a ? p + i * a.ld : i + p * a.ld);
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t p = 0; p < k; ++p) {
          op_b[j * k + p] = Load(b_data, b.type, trans_b ? j + p * b.ld : p + j * b.ld);
        }
      }
    }
    const int64_t c_offset = bi * c.stride;
    const int64_t d_offset = bi * d_layout.stride;
    for (int64_t j = 0; j < n; ++j) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      if (product) {
        const float* b_col = op_b.data() + j * k;
        for (int64_t p = 0; p < k; ++p) {
          const float bv = b_col[p];
          const float* a_col = op_a.data() + p * m;
          float* out = acc.data();
          for (int64_t i = 0; i < m; ++i) out[i] += a_col[i] * bv;
        }
      }
      for (int64_t i = 0; i < m; ++i) {
        float v = product ? alpha * acc[i] : 0.0f;
        // C is read before D is written: in place (C == D, one layout) is safe.
        if (beta != 0.0f) v += beta * Load(c.data, c.type, c_offset + i + j * c.ld);
        if (ep.bias) v += Load(ep.bias_data, ep.type, bi * ep.bias_stride + i);
        if (ep.aux) Store(ep.aux_data, ep.type, bi * ep.aux_stride + i + j * ep.aux_ld, v);
        if (ep.gelu) v = Gelu(v);
        Store(d, d_layout.type, d_offset + i + j * d_layout.ld, v);
      }
    }
  }
}

// ---- cuBLASLt problem checks ----

// The epilogues implemented here.
bool KnownEpilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

// A matmul's shape and kind, checked against its descriptor and layouts.
struct Problem {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int ab_type = 0;
  int cd_type = 0;
  bool bias = false;
  bool gelu = false;
  bool aux = false;
  const Layout* a = nullptr;
  const Layout* b = nullptr;
  const Layout* c = nullptr;
  const Layout* d = nullptr;
};

// What identifies the kind of problem an algorithm was chosen for.
uint64_t PackKind(const Problem& p, uint32_t epilogue) {
  return static_cast<uint64_t>(p.ab_type) | static_cast<uint64_t>(p.cd_type) << 8 |
         static_cast<uint64_t>(p.trans_a) << 16 | static_cast<uint64_t>(p.trans_b) << 17 |
         static_cast<uint64_t>(epilogue) << 32;
}

bool IsTransposed(int32_t op) { return op != CUBLAS_OP_N; }

// Checks the descriptor and layouts as cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic do. A
// null Cdesc stands for Ddesc.
cublasStatus_t CheckProblem(const MatmulDesc* desc, cublasLtMatrixLayout_t a_desc,
                            cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc,
                            cublasLtMatrixLayout_t d_desc, Problem* out) {
  const Layout* a = AsLayout(a_desc);
  const Layout* b = AsLayout(b_desc);
  const Layout* d = AsLayout(d_desc);
  const Layout* c = c_desc == nullptr ? d : AsLayout(c_desc);
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (desc->compute_type != CUBLAS_COMPUTE_32F || desc->scale_type != CUDA_R_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  for (const Layout* l : {a, b, c, d}) {
    // cublasLt.h: ld must be at least the number of rows (column order); batch count >= 1.
    if (l->ld < 0 || static_cast<uint64_t>(l->ld) < l->rows || l->batch < 1) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (l->rows > static_cast<uint64_t>(INT32_MAX) || l->cols > static_cast<uint64_t>(INT32_MAX)) {
      return CUBLAS_STATUS_NOT_SUPPORTED;  // "only values expressible as int32_t are supported"
    }
  }
  Problem p;
  p.trans_a = IsTransposed(desc->trans_a);
  p.trans_b = IsTransposed(desc->trans_b);
  p.m = static_cast<int64_t>(d->rows);
  p.n = static_cast<int64_t>(d->cols);
  const int64_t a_rows = static_cast<int64_t>(a->rows), a_cols = static_cast<int64_t>(a->cols);
  const int64_t b_rows = static_cast<int64_t>(b->rows), b_cols = static_cast<int64_t>(b->cols);
  p.k = p.trans_a ? a_rows : a_cols;
  if ((p.trans_a ? a_cols : a_rows) != p.m) return CUBLAS_STATUS_INVALID_VALUE;
  if ((p.trans_b ? b_cols : b_rows) != p.k || (p.trans_b ? b_rows : b_cols) != p.n) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // C: D's type, shape, batch count and order (the guide's out-of-place rule).
  if (c->rows != d->rows || c->cols != d->cols || c->type != d->type) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  p.batch = d->batch;
  if (a->type != b->type || !SupportedTypes(static_cast<int>(a->type), static_cast<int>(d->type))) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  p.ab_type = static_cast<int>(a->type);
  p.cd_type = static_cast<int>(d->type);
  const uint32_t e = desc->epilogue;
  p.bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  p.gelu = (e & CUBLASLT_EPILOGUE_GELU) != 0;
  p.aux = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  // The bias and the GeLU input have D's type (cublasLt.h: BIAS_DATA_TYPE,
  // EPILOGUE_AUX_DATA_TYPE; other types are for IMMA and fp8 kernels only).
  if (p.bias && desc->bias_type != -1 && desc->bias_type != p.cd_type) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (p.aux) {
    if (desc->aux_type != -1 && desc->aux_type != p.cd_type) return CUBLAS_STATUS_NOT_SUPPORTED;
    // cublasLt.h, EPILOGUE_AUX_LD: "Must be divisible by 8 and be no less than the number of rows
    // in the output matrix"; EPILOGUE_AUX_BATCH_STRIDE: "Must be divisible by 8".
    if (desc->aux_ld < p.m || desc->aux_ld % kAuxMultiple != 0) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (p.batch > 1 && desc->aux_batch_stride % kAuxMultiple != 0) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  p.a = a;
  p.b = b;
  p.c = c;
  p.d = d;
  *out = p;
  return CUBLAS_STATUS_SUCCESS;
}

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
using emu::AsDesc;
using emu::AsMutableLayout;
using emu::AsPref;
using emu::ReadAttribute;

extern "C" {

// ---- cuBLAS ----

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

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

// ---- cuBLASLt: handle and descriptors ----

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* desc = new emu::MatmulDesc();
  desc->compute_type = static_cast<int32_t>(computeType);
  desc->scale_type = static_cast<int32_t>(scaleType);
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_SUCCESS;
  emu::MatmulDesc* desc = AsDesc(matmulDesc);
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  desc->tag = 0;
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes) {
  emu::MatmulDesc* desc = AsDesc(matmulDesc);
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t invalid = CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return ReadAttribute(buf, sizeInBytes, &desc->compute_type) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return ReadAttribute(buf, sizeInBytes, &desc->scale_type) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: {
      int32_t v;
      if (!ReadAttribute(buf, sizeInBytes, &v) || v != CUBLASLT_POINTER_MODE_HOST) return invalid;
      desc->pointer_mode = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      int32_t v;
      // CUBLAS_OP_C is CUBLAS_OP_T for the real types emulated here.
      if (!ReadAttribute(buf, sizeInBytes, &v) ||
          (v != CUBLAS_OP_N && v != CUBLAS_OP_T && v != CUBLAS_OP_C)) {
        return invalid;
      }
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->trans_a : desc->trans_b) = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_TRANSC: {
      int32_t v;  // cublasLt.h: "Currently only CUBLAS_OP_N is supported."
      if (!ReadAttribute(buf, sizeInBytes, &v) || v != CUBLAS_OP_N) return invalid;
      desc->trans_c = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t v;
      if (!ReadAttribute(buf, sizeInBytes, &v) || !emu::KnownEpilogue(v)) return invalid;
      desc->epilogue = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return ReadAttribute(buf, sizeInBytes, &desc->bias) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return ReadAttribute(buf, sizeInBytes, &desc->bias_batch_stride) ? CUBLAS_STATUS_SUCCESS
                                                                       : invalid;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return ReadAttribute(buf, sizeInBytes, &desc->aux) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return ReadAttribute(buf, sizeInBytes, &desc->aux_ld) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return ReadAttribute(buf, sizeInBytes, &desc->aux_batch_stride) ? CUBLAS_STATUS_SUCCESS
                                                                      : invalid;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return ReadAttribute(buf, sizeInBytes, &desc->aux_type) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return ReadAttribute(buf, sizeInBytes, &desc->bias_type) ? CUBLAS_STATUS_SUCCESS : invalid;
    default:
      return invalid;  // Not emulated.
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* layout = new emu::Layout();
  layout->type = static_cast<uint32_t>(type);
  layout->rows = rows;
  layout->cols = cols;
  layout->ld = ld;
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (matLayout == nullptr) return CUBLAS_STATUS_SUCCESS;
  emu::Layout* layout = AsMutableLayout(matLayout);
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  layout->tag = 0;
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  emu::Layout* layout = AsMutableLayout(matLayout);
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t invalid = CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return ReadAttribute(buf, sizeInBytes, &layout->type) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      int32_t v;  // Only column order is emulated.
      if (!ReadAttribute(buf, sizeInBytes, &v) || v != CUBLASLT_ORDER_COL) return invalid;
      layout->order = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return ReadAttribute(buf, sizeInBytes, &layout->rows) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return ReadAttribute(buf, sizeInBytes, &layout->cols) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return ReadAttribute(buf, sizeInBytes, &layout->ld) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return ReadAttribute(buf, sizeInBytes, &layout->batch) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return ReadAttribute(buf, sizeInBytes, &layout->stride) ? CUBLAS_STATUS_SUCCESS : invalid;
    default:
      return invalid;  // Not emulated (planar complex, pointer-array batches).
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new emu::Preference());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (pref == nullptr) return CUBLAS_STATUS_SUCCESS;
  emu::Preference* p = AsPref(pref);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  p->tag = 0;
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  emu::Preference* p = AsPref(pref);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t invalid = CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: {
      uint32_t v;  // Only the best-fit search is emulated.
      if (!ReadAttribute(buf, sizeInBytes, &v) || v != CUBLASLT_SEARCH_BEST_FIT) return invalid;
      p->search_mode = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->max_workspace) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return ReadAttribute(buf, sizeInBytes, &p->reduction_mask) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->align_a) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->align_b) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->align_c) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->align_d) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT:
      return ReadAttribute(buf, sizeInBytes, &p->max_waves) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_IMPL_MASK:
      return ReadAttribute(buf, sizeInBytes, &p->impl_mask) ? CUBLAS_STATUS_SUCCESS : invalid;
    default:
      return invalid;  // Not emulated.
  }
}

// ---- cuBLASLt: algorithm selection and the product ----

// One algorithm (no workspace, no split-K reduction) for every supported problem. It needs each
// matrix, the bias and the aux matrix aligned to their element size, and (like the real kernels)
// may assume the alignments the preference promises for A, B, C and D and the alignment the bias
// and aux pointers had here; cublasLtMatmul holds its caller to them.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  using emu::Alignment;
  using emu::TypeSize;
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const emu::Preference* pref = AsPref(preference);
  if (requestedAlgoCount <= 0 || heuristicResultsArray == nullptr || returnAlgoCount == nullptr ||
      pref == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returnAlgoCount = 0;
  const emu::MatmulDesc* desc = AsDesc(operationDesc);
  emu::Problem p;
  const cublasStatus_t status = emu::CheckProblem(desc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  const uint64_t ab_size = TypeSize(p.ab_type), cd_size = TypeSize(p.cd_type);
  // The bias and aux pointers' alignment, read from the descriptor (cublasLt.h: "Routines that
  // don't dereference this pointer, like cublasLtMatmulAlgoGetHeuristic() depend on its value to
  // determine expected pointer alignment"), with their batch strides.
  const int64_t cd_bytes = static_cast<int64_t>(cd_size);
  const uint64_t align_bias =
      p.bias ? Alignment(desc->bias, p.batch, desc->bias_batch_stride * cd_bytes) : 0;
  const uint64_t align_aux =
      p.aux ? Alignment(desc->aux, p.batch, desc->aux_batch_stride * cd_bytes) : 0;
  if (pref->align_a < ab_size || pref->align_b < ab_size || pref->align_c < cd_size ||
      pref->align_d < cd_size || (p.bias && align_bias < cd_size) ||
      (p.aux && align_aux < cd_size)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;  // No algorithm for such alignment.
  }
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  std::memset(&r, 0, sizeof(r));
  r.algo.data[emu::kAlgoTagField] = emu::kAlgoTag;
  r.algo.data[emu::kAlgoKind] = emu::PackKind(p, desc->epilogue);
  r.algo.data[emu::kAlgoAlignA] = std::min<uint64_t>(pref->align_a, emu::kMaxAlignment);
  r.algo.data[emu::kAlgoAlignB] = std::min<uint64_t>(pref->align_b, emu::kMaxAlignment);
  r.algo.data[emu::kAlgoAlignC] = std::min<uint64_t>(pref->align_c, emu::kMaxAlignment);
  r.algo.data[emu::kAlgoAlignD] = std::min<uint64_t>(pref->align_d, emu::kMaxAlignment);
  r.algo.data[emu::kAlgoAlignBias] = align_bias;
  r.algo.data[emu::kAlgoAlignAux] = align_aux;
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  using emu::Alignment;
  using emu::CheckDeviceMatrix;
  using emu::Fail;
  using emu::Matrix;
  using emu::TypeSize;
  (void)workspaceSizeInBytes;  // The algorithm needs no workspace.
  (void)stream;                // Synchronous.
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const emu::MatmulDesc* desc = AsDesc(computeDesc);
  emu::Problem p;
  const cublasStatus_t status = emu::CheckProblem(desc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  // The guide: the workspace "must be 256B aligned".
  if (workspace != nullptr &&
      reinterpret_cast<uintptr_t>(workspace) % emu::kWorkspaceAlignment != 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // In place needs C == D with one layout (Cdesc == Ddesc).
  if (C == D && C != nullptr && (p.c->ld != p.d->ld || p.c->stride != p.d->stride)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if ((p.bias && desc->bias == nullptr) || (p.aux && desc->aux == nullptr)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float alpha_v = *static_cast<const float*>(alpha);
  const float beta_v = *static_cast<const float*>(beta);
  const int64_t ab_size = static_cast<int64_t>(TypeSize(p.ab_type));
  const int64_t cd_size = static_cast<int64_t>(TypeSize(p.cd_type));
  const char* fn = "cublasLtMatmul";
  if (algo != nullptr && (algo->data[emu::kAlgoTagField] != emu::kAlgoTag ||
                          algo->data[emu::kAlgoKind] != emu::PackKind(p, desc->epilogue))) {
    return CUBLAS_STATUS_INVALID_VALUE;  // Not an algorithm of this problem's kind.
  }
  // Everything the product reads or writes must be device memory.
  const bool product = p.k > 0 && alpha_v != 0.0f;
  if (product) {
    CheckDeviceMatrix(fn, "A", A, p.ab_type, static_cast<int64_t>(p.a->rows),
                      static_cast<int64_t>(p.a->cols), p.a->ld, p.batch, p.a->stride);
    CheckDeviceMatrix(fn, "B", B, p.ab_type, static_cast<int64_t>(p.b->rows),
                      static_cast<int64_t>(p.b->cols), p.b->ld, p.batch, p.b->stride);
  }
  if (beta_v != 0.0f) {
    CheckDeviceMatrix(fn, "C", C, p.cd_type, p.m, p.n, p.c->ld, p.batch, p.c->stride);
  }
  CheckDeviceMatrix(fn, "D", D, p.cd_type, p.m, p.n, p.d->ld, p.batch, p.d->stride);
  emu::Epilogue ep;
  ep.type = p.cd_type;
  ep.gelu = p.gelu;
  if (p.bias) {
    ep.bias = true;
    ep.bias_data = desc->bias;
    ep.bias_stride = desc->bias_batch_stride;
    CheckDeviceMatrix(fn, "bias", ep.bias_data, ep.type, p.m, 1, p.m, p.batch, ep.bias_stride);
  }
  if (p.aux) {
    ep.aux = true;
    ep.aux_data = desc->aux;
    ep.aux_ld = desc->aux_ld;
    ep.aux_stride = desc->aux_batch_stride;
    CheckDeviceMatrix(fn, "aux", ep.aux_data, ep.type, p.m, p.n, ep.aux_ld, p.batch, ep.aux_stride);
  }
  // The algorithm may assume the alignments it was chosen for.
  if (algo != nullptr) {
    const uint64_t* data = algo->data;
    const struct {
      const char* name;
      const void* ptr;
      int64_t stride_bytes;
      uint64_t assumed;
    } checks[] = {
        {"A", product ? A : nullptr, p.a->stride * ab_size, data[emu::kAlgoAlignA]},
        {"B", product ? B : nullptr, p.b->stride * ab_size, data[emu::kAlgoAlignB]},
        {"C", beta_v != 0.0f ? C : nullptr, p.c->stride * cd_size, data[emu::kAlgoAlignC]},
        {"D", D, p.d->stride * cd_size, data[emu::kAlgoAlignD]},
        {"bias", ep.bias_data, ep.bias_stride * cd_size, data[emu::kAlgoAlignBias]},
        {"aux", ep.aux_data, ep.aux_stride * cd_size, data[emu::kAlgoAlignAux]},
    };
    for (const auto& c : checks) {
      if (c.ptr == nullptr) continue;
      const uint64_t have = Alignment(c.ptr, p.batch, c.stride_bytes);
      if (have < c.assumed) {
        Fail(
            "%s: %s (%p, batch stride %lld bytes) is %llu-byte aligned, but the algorithm was "
            "chosen for %llu-byte alignment (the heuristic's preference or pointer); a GPU "
            "kernel would fault on a misaligned access",
            fn, c.name, c.ptr, static_cast<long long>(c.stride_bytes),
            static_cast<unsigned long long>(have), static_cast<unsigned long long>(c.assumed));
      }
    }
  }
  emu::DeviceAccess access;
  const Matrix a{A, p.ab_type, p.a->ld, p.a->stride};
  const Matrix b{B, p.ab_type, p.b->ld, p.b->stride};
  const Matrix c{C, p.cd_type, p.c->ld, p.c->stride};
  const Matrix d{D, p.cd_type, p.d->ld, p.d->stride};
  emu::Compute(p.trans_a, p.trans_b, p.m, p.n, p.k, p.batch, alpha_v, a, b, beta_v, c, D, d, ep);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
