// The emulated cuBLASLt's handle, matmul descriptors, matrix layouts and preferences: each
// attribute the project sets, checked for the size and values cublasLt.h allows
// (blas_internal.h has the semantics).
#include <cublasLt.h>

#include <cstring>

#include "core/cuda/emu/blas_internal.h"

// The handle the header declares only as an incomplete type.
struct cublasLtContext {
  int device = 0;
};

namespace mt {
namespace cuda_emu {

namespace {

// Reads an attribute value of exactly sizeof(V) bytes (the headers' size check).
template <typename V>
bool ReadAttribute(const void* buf, size_t size, V* out) {
  if (buf == nullptr || size != sizeof(V)) return false;
  std::memcpy(out, buf, sizeof(V));
  return true;
}

// A setter's status for a field that takes any value: INVALID_VALUE when the size is wrong.
template <typename V>
cublasStatus_t Set(const void* buf, size_t size, V* field) {
  return ReadAttribute(buf, size, field) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// Deletes a tagged descriptor (the Destroy functions): null is a no-op, another kind of object
// INVALID_VALUE; the tag is cleared first so that a stale handle is refused, not reused.
template <typename T>
cublasStatus_t DestroyTagged(bool null, T* object) {
  if (null) return CUBLAS_STATUS_SUCCESS;
  if (object == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  object->tag = 0;
  delete object;
  return CUBLAS_STATUS_SUCCESS;
}

// The epilogues implemented here.
bool KnownEpilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

}  // namespace
}  // namespace cuda_emu
}  // namespace mt

namespace emu = ::mt::cuda_emu;
using emu::AsDesc;
using emu::AsMutableLayout;
using emu::AsPref;
using emu::ReadAttribute;
using emu::Set;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  return emu::Create<cublasLtContext>(lightHandle);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  return emu::DestroyHandle(lightHandle);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  emu::MatmulDesc* desc = nullptr;
  const cublasStatus_t status = emu::Create(matmulDesc, &desc);
  if (desc != nullptr) {
    desc->compute_type = static_cast<int32_t>(computeType);
    desc->scale_type = static_cast<int32_t>(scaleType);
  }
  return status;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return emu::DestroyTagged(matmulDesc == nullptr, AsDesc(matmulDesc));
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes) {
  emu::MatmulDesc* desc = AsDesc(matmulDesc);
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t invalid = CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return Set(buf, sizeInBytes, &desc->compute_type);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return Set(buf, sizeInBytes, &desc->scale_type);
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
      return Set(buf, sizeInBytes, &desc->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return Set(buf, sizeInBytes, &desc->bias_batch_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return Set(buf, sizeInBytes, &desc->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return Set(buf, sizeInBytes, &desc->aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return Set(buf, sizeInBytes, &desc->aux_batch_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return Set(buf, sizeInBytes, &desc->aux_type);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return Set(buf, sizeInBytes, &desc->bias_type);
    default:
      return invalid;  // Not emulated.
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  emu::Layout* layout = nullptr;
  const cublasStatus_t status = emu::Create(matLayout, &layout);
  if (layout != nullptr) {
    layout->type = static_cast<uint32_t>(type);
    layout->rows = rows;
    layout->cols = cols;
    layout->ld = ld;
  }
  return status;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return emu::DestroyTagged(matLayout == nullptr, AsMutableLayout(matLayout));
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  emu::Layout* layout = AsMutableLayout(matLayout);
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t invalid = CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return Set(buf, sizeInBytes, &layout->type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      int32_t v;  // Only column order is emulated.
      if (!ReadAttribute(buf, sizeInBytes, &v) || v != CUBLASLT_ORDER_COL) return invalid;
      layout->order = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return Set(buf, sizeInBytes, &layout->rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return Set(buf, sizeInBytes, &layout->cols);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return Set(buf, sizeInBytes, &layout->ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return Set(buf, sizeInBytes, &layout->batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return Set(buf, sizeInBytes, &layout->stride);
    default:
      return invalid;  // Not emulated (planar complex, pointer-array batches).
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return emu::Create<emu::Preference>(pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return emu::DestroyTagged(pref == nullptr, AsPref(pref));
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
      return Set(buf, sizeInBytes, &p->max_workspace);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return Set(buf, sizeInBytes, &p->reduction_mask);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return Set(buf, sizeInBytes, &p->align_a);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return Set(buf, sizeInBytes, &p->align_b);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return Set(buf, sizeInBytes, &p->align_c);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return Set(buf, sizeInBytes, &p->align_d);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT:
      return Set(buf, sizeInBytes, &p->max_waves);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK:
      return Set(buf, sizeInBytes, &p->impl_mask);
    default:
      return invalid;  // Not emulated.
  }
}

}  // extern "C"
