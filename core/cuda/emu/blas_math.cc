// The product and its epilogues, shared by the emulated cuBLAS and cuBLASLt (blas_internal.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda/emu/blas_internal.h"
#include "core/cuda/emu/internal.h"

namespace mt {
namespace cuda_emu {

namespace {

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

// Matrix `bi` of a batch of `m`, widened to float in column-major order: element (i, p) of op(M)
// at i + p * rows, op(M) being rows x cols (the transpose of what M stores when `trans`).
void LoadOp(const Matrix& m, bool trans, int64_t bi, int64_t rows, int64_t cols, float* out) {
  const void* data =
      static_cast<const char*>(m.data) + bi * m.stride * static_cast<int64_t>(TypeSize(m.type));
  for (int64_t p = 0; p < cols; ++p) {
    for (int64_t i = 0; i < rows; ++i) {
      out[p * rows + i] = Load(data, m.type, trans ? p + i * m.ld : i + p * m.ld);
    }
  }
}

}  // namespace

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

bool SupportedTypes(int ab, int cd) {
  if (ab == CUDA_R_32F) return cd == CUDA_R_32F;
  if (ab == CUDA_R_16F || ab == CUDA_R_16BF) return cd == ab || cd == CUDA_R_32F;
  return false;
}

uint64_t Alignment(const void* p, int64_t batch, int64_t stride_bytes) {
  uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) | kMaxAlignment;
  if (batch > 1) bits |= static_cast<uint64_t>(stride_bytes);
  return bits & (~bits + 1);
}

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
      LoadOp(a, trans_a, bi, m, k, op_a.data());
      LoadOp(b, trans_b, bi, k, n, op_b.data());
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

}  // namespace cuda_emu
}  // namespace mt
