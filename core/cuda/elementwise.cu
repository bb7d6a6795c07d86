// Element-wise kernels: unary and binary maps, dtype conversion, fill and Philox dropout. One
// thread per element in grid-stride loops; math in f32 and one rounding to the element type, as
// the CPU kernels in core/ops do.
#include "core/cuda/kernel_util.cuh"
#include "core/philox.h"

namespace mt {
namespace cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float GeluForward(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float GeluDerivative(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float t = tanhf(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// The exact GeLU x Phi(x) and its derivative Phi(x) + x phi(x), as the CPU kernels compute them.
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

__device__ __forceinline__ float GeluErfForward(float x) {
  return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
}

__device__ __forceinline__ float GeluErfDerivative(float x) {
  return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
}

template <typename T, UnaryOp kOp>
__global__ void UnaryKernel(const T* x, T* y, int64_t n, float alpha) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float v = Load(x + i);
    float r;
    if constexpr (kOp == UnaryOp::kGelu) {
      r = GeluForward(v);
    } else if constexpr (kOp == UnaryOp::kGeluErf) {
      r = GeluErfForward(v);
    } else if constexpr (kOp == UnaryOp::kTanh) {
      r = tanhf(v);
    } else {
      r = alpha * v;
    }
    Store(y + i, r);
  }
}

template <typename T, BinaryOp kOp>
__global__ void BinaryKernel(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float va = Load(a + i);
    const float vb = Load(b + i);
    float r;
    if constexpr (kOp == BinaryOp::kAdd) {
      r = va + vb;
    } else if constexpr (kOp == BinaryOp::kGeluBackward) {
      r = vb * GeluDerivative(va);
    } else if constexpr (kOp == BinaryOp::kGeluErfBackward) {
      r = vb * GeluErfDerivative(va);
    } else {
      // (1 - t)(1 + t) rather than 1 - t^2: no cancellation where |t| is close to 1.
      r = vb * ((1.0f - va) * (1.0f + va));
    }
    Store(out + i, r);
  }
}

template <typename From, typename To>
__global__ void ConvertKernel(const From* x, To* y, int64_t n) {
  // Widening to f32 is exact, so the one rounding is Store's (nearest even).
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) Store(y + i, Load(x + i));
}

template <typename U>
__global__ void FillKernel(U* x, int64_t n, U value) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) x[i] = value;
}

// ops::DropoutKey (core/ops/elementwise.h), which is host-only.
__device__ __forceinline__ uint64_t DropoutKey(const DropoutParams& p, int64_t i) {
  const int64_t key = p.key_inner <= 0
                          ? p.key_base + i
                          : p.key_base + (i / p.key_inner) * p.key_outer_stride + i % p.key_inner;
  return static_cast<uint64_t>(key);
}

// The dropout keep-test of element i, for the elements one thread visits in increasing order:
// one Philox block serves four consecutive keys and is evaluated once for them (as the CPU
// kernel's DropoutMask does).
class DropoutSampler {
 public:
  __device__ explicit DropoutSampler(const DropoutParams& p)
      : p_(p), key_{static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32)} {}

  __device__ bool Keep(int64_t i) {
    const uint64_t k = DropoutKey(p_, i);
    const uint64_t block = k >> 2;
    if (!valid_ || block != cached_block_) {
      const uint32_t ctr[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                               static_cast<uint32_t>(p_.stream_id),
                               static_cast<uint32_t>(p_.stream_id >> 32)};
      out_ = Philox4x32_10(ctr, key_);
      cached_block_ = block;
      valid_ = true;
    }
    // The expression of PhiloxUniform, so the comparison with p is the CPU's, bit for bit.
    const float u = static_cast<float>(out_.v[k & 3] >> 8) * (1.0f / 16777216.0f);
    return u >= p_.p;
  }

 private:
  const DropoutParams& p_;
  const uint32_t key_[2];
  Philox4x32Output out_{};
  uint64_t cached_block_ = 0;
  bool valid_ = false;
};

// Each thread handles four consecutive elements per step, so that a run of consecutive keys
// evaluates one Philox block for up to four elements.
template <typename T>
__global__ void DropoutKernel(const T* x, T* y, int64_t n, DropoutParams p) {
  for (int64_t base = 4 * GlobalThread(); base < n; base += 4 * GridStride()) {
    DropoutSampler sampler(p);
    for (int j = 0; j < 4 && base + j < n; ++j) {
      const int64_t i = base + j;
      Store(y + i, sampler.Keep(i) ? Load(x + i) * p.scale : 0.0f);
    }
  }
}

// Bias-dropout-add with DropoutKernel's mask and grouping of four elements per step. Every f32
// operation is an explicitly rounded intrinsic, so that nvcc cannot contract (x + b) * scale + r
// into an FMA: the roundings are the CPU kernel's.
template <typename T, bool kBias>
__global__ void BiasDropoutAddKernel(const T* x, const T* bias, const T* residual, T* out,
                                     int64_t n, int64_t cols, DropoutParams p) {
  const bool drop = p.p > 0.0f;
  for (int64_t base = 4 * GlobalThread(); base < n; base += 4 * GridStride()) {
    DropoutSampler sampler(p);
    for (int j = 0; j < 4 && base + j < n; ++j) {
      const int64_t i = base + j;
      float v = Load(x + i);
      if constexpr (kBias) v = __fadd_rn(v, Load(bias + i % cols));
      if (drop) v = sampler.Keep(i) ? __fmul_rn(v, p.scale) : 0.0f;
      Store(out + i, __fadd_rn(Load(residual + i), v));
    }
  }
}

}  // namespace

LaunchResult LaunchUnary(ElemType type, UnaryOp op, const void* x, void* y, int64_t n, float alpha,
                         void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    switch (op) {
      case UnaryOp::kGelu:
        MT_LAUNCH(GridFor(n), kThreads, 0, s, UnaryKernel<T, UnaryOp::kGelu>)(px, py, n, alpha);
        break;
      case UnaryOp::kGeluErf:
        MT_LAUNCH(GridFor(n), kThreads, 0, s, UnaryKernel<T, UnaryOp::kGeluErf>)(px, py, n, alpha);
        break;
      case UnaryOp::kTanh:
        MT_LAUNCH(GridFor(n), kThreads, 0, s, UnaryKernel<T, UnaryOp::kTanh>)(px, py, n, alpha);
        break;
      case UnaryOp::kScale:
        MT_LAUNCH(GridFor(n), kThreads, 0, s, UnaryKernel<T, UnaryOp::kScale>)(px, py, n, alpha);
        break;
    }
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchBinary(ElemType type, BinaryOp op, const void* a, const void* b, void* out,
                          int64_t n, void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
    switch (op) {
      case BinaryOp::kAdd:
        MT_LAUNCH(GridFor(n), kThreads, 0, s, BinaryKernel<T, BinaryOp::kAdd>)(pa, pb, po, n);
        break;
      case BinaryOp::kGeluBackward:
        MT_LAUNCH(GridFor(n), kThreads, 0, s, BinaryKernel<T, BinaryOp::kGeluBackward>)
        (pa, pb, po, n);
        break;
      case BinaryOp::kGeluErfBackward:
        MT_LAUNCH(GridFor(n), kThreads, 0, s, BinaryKernel<T, BinaryOp::kGeluErfBackward>)
        (pa, pb, po, n);
        break;
      case BinaryOp::kTanhBackward:
        MT_LAUNCH(GridFor(n), kThreads, 0, s, BinaryKernel<T, BinaryOp::kTanhBackward>)
        (pa, pb, po, n);
        break;
    }
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchConvert(ElemType from, ElemType to, const void* x, void* y, int64_t n,
                           void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(from, [&](auto from_tag) -> LaunchResult {
    using From = typename decltype(from_tag)::type;
    return internal::DispatchElem(to, [&](auto to_tag) -> LaunchResult {
      using To = typename decltype(to_tag)::type;
      MT_LAUNCH(GridFor(n), kThreads, 0, s, ConvertKernel<From, To>)
      (static_cast<const From*>(x), static_cast<To*>(y), n);
      MT_CHECK_LAUNCH();
      return {};
    });
  });
}

LaunchResult LaunchFill(const void* pattern, int elem_bytes, void* x, int64_t n, void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  switch (elem_bytes) {
    case 2:
      MT_LAUNCH(GridFor(n), kThreads, 0, s, FillKernel<uint16_t>)
      (static_cast<uint16_t*>(x), n, *static_cast<const uint16_t*>(pattern));
      break;
    case 4:
      MT_LAUNCH(GridFor(n), kThreads, 0, s, FillKernel<uint32_t>)
      (static_cast<uint32_t*>(x), n, *static_cast<const uint32_t*>(pattern));
      break;
    case 8:
      MT_LAUNCH(GridFor(n), kThreads, 0, s, FillKernel<uint64_t>)
      (static_cast<uint64_t*>(x), n, *static_cast<const uint64_t*>(pattern));
      break;
    default:
      return LaunchResult{static_cast<int>(cudaErrorInvalidValue), __FILE__, __LINE__};
  }
  MT_CHECK_LAUNCH();
  return {};
}

LaunchResult LaunchDropout(ElemType type, const void* x, void* y, int64_t n,
                           const DropoutParams& params, void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    MT_LAUNCH(GridFor((n + 3) / 4), kThreads, 0, s, DropoutKernel<T>)
    (static_cast<const T*>(x), static_cast<T*>(y), n, params);
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchBiasDropoutAdd(ElemType type, const void* x, const void* bias,
                                  const void* residual, void* out, int64_t n, int64_t cols,
                                  const DropoutParams& params, void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x);
    const T* pb = static_cast<const T*>(bias);
    const T* pr = static_cast<const T*>(residual);
    T* po = static_cast<T*>(out);
    if (pb != nullptr) {
      MT_LAUNCH(GridFor((n + 3) / 4), kThreads, 0, s, BiasDropoutAddKernel<T, true>)
      (px, pb, pr, po, n, cols, params);
    } else {
      MT_LAUNCH(GridFor((n + 3) / 4), kThreads, 0, s, BiasDropoutAddKernel<T, false>)
      (px, pb, pr, po, n, cols, params);
    }
    MT_CHECK_LAUNCH();
    return {};
  });
}

}  // namespace cuda
}  // namespace mt
