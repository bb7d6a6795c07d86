// The element-wise ops of core/ops (internal): y = fn(x) and out = fn(a, b) element by element,
// in f32 math (each element converted from and rounded back to T), split over the context's pool;
// and the whole of such an op (checks, device route, CPU loop) in one call.
#ifndef MT_CORE_OPS_ELEMENTWISE_LOOPS_H_
#define MT_CORE_OPS_ELEMENTWISE_LOOPS_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace mt {
namespace ops {
namespace internal {

// Elements per ParallelFor chunk: large enough that scheduling costs nothing next to the work.
inline constexpr int64_t kElementwiseGrain = 1 << 14;

// y[i] = FromFloat<T>(fn(ToFloat(x[i]))) over all elements (contiguous views of T, same size).
// y may alias x.
template <typename T, typename Fn>
void MapUnary(const ExecContext& ctx, const TensorView& x, const TensorView& y, Fn fn) {
  const T* px = x.data_as<T>();
  T* py = y.data_as<T>();
  ParallelFor(ctx.pool, x.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) py[i] = FromFloat<T>(fn(ToFloat(px[i])));
  });
}

// out[i] = FromFloat<T>(fn(ToFloat(a[i]), ToFloat(b[i]))) over all elements. out may alias a or
// b.
template <typename T, typename Fn>
void MapBinary(const ExecContext& ctx, const TensorView& a, const TensorView& b,
               const TensorView& out, Fn fn) {
  const T* pa = a.data_as<T>();
  const T* pb = b.data_as<T>();
  T* po = out.data_as<T>();
  ParallelFor(ctx.pool, a.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) po[i] = FromFloat<T>(fn(ToFloat(pa[i]), ToFloat(pb[i])));
  });
}

// A thread's f32 scratch for the 16-bit ranges below: two blocks of kElementwiseGrain elements
// (the ranges go through it a block at a time; every element is independent of the others).
inline float* RangeScratch() {
  thread_local std::vector<float> buf(2 * kElementwiseGrain);
  return buf.data();
}

// y = fn(x) where fn works on f32 ranges, fn(const float* x, float* y, int64_t n) (a SIMD kernel
// such as gelu_simd.h's): on the tensors themselves for T = float, else through f32 copies of each
// chunk, so that every element is the f32 function of its widened value rounded once to T. y may
// alias x.
template <typename T, typename RangeFn>
void MapUnaryRanges(const ExecContext& ctx, const TensorView& x, const TensorView& y, RangeFn fn) {
  const T* px = x.data_as<T>();
  T* py = y.data_as<T>();
  ParallelFor(ctx.pool, x.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      fn(px + begin, py + begin, end - begin);
    } else {
      float* buf = RangeScratch();
      for (int64_t b0 = begin; b0 < end; b0 += kElementwiseGrain) {
        const int64_t n = std::min(end - b0, kElementwiseGrain);
        ToF32(px + b0, n, buf);
        fn(buf, buf, n);
        FromF32(buf, n, py + b0);
      }
    }
  });
}

// out = fn(a, b) where fn(const float* a, const float* b, float* out, int64_t n) works on f32
// ranges, as MapUnaryRanges. out may alias a or b.
template <typename T, typename RangeFn>
void MapBinaryRanges(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                     const TensorView& out, RangeFn fn) {
  const T* pa = a.data_as<T>();
  const T* pb = b.data_as<T>();
  T* po = out.data_as<T>();
  ParallelFor(ctx.pool, a.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      fn(pa + begin, pb + begin, po + begin, end - begin);
    } else {
      float* buf = RangeScratch();
      for (int64_t b0 = begin; b0 < end; b0 += kElementwiseGrain) {
        const int64_t n = std::min(end - b0, kElementwiseGrain);
        ToF32(pa + b0, n, buf);
        ToF32(pb + b0, n, buf + kElementwiseGrain);
        fn(buf, buf + kElementwiseGrain, buf, n);
        FromF32(buf, n, po + b0);
      }
    }
  });
}

// The CUDA implementation of an element-wise op: &cuda::Name (core/cuda/ops_cuda.h).
using UnaryKernel = absl::Status (*)(const ExecContext&, const TensorView&, const TensorView&);
using BinaryKernel = absl::Status (*)(const ExecContext&, const TensorView&, const TensorView&,
                                      const TensorView&);

// The op y = fn(x): x and y float, same dtype, shape and device, contiguous (checked, errors
// naming `op` and the tensors); cuda_kernel on a CUDA device, MapUnary on the CPU.
template <typename Fn>
absl::Status RunUnary(absl::string_view op, const ExecContext& ctx, const NamedView& x,
                      const NamedView& y, UnaryKernel cuda_kernel, Fn fn) {
  RETURN_IF_ERROR(CheckMatching(op, {x, y}, kFloatDTypes));
  const TensorView &vx = *x.view, &vy = *y.view;
  MT_ROUTE_DEVICE(op, vx, cuda_kernel(ctx, vx, vy));
  DispatchFloat(vx.dtype, [&](auto tag) { MapUnary<decltype(tag)>(ctx, vx, vy, fn); });
  return absl::OkStatus();
}

// The op out = fn(a, b), with RunUnary's checks and routing over the three tensors. fn works on
// elements, fn(float, float) (MapBinary), or on f32 ranges, fn(const float* a, const float* b,
// float* out, int64_t n) (MapBinaryRanges).
template <typename Fn>
absl::Status RunBinary(absl::string_view op, const ExecContext& ctx, const NamedView& a,
                       const NamedView& b, const NamedView& out, BinaryKernel cuda_kernel, Fn fn) {
  RETURN_IF_ERROR(CheckMatching(op, {a, b, out}, kFloatDTypes));
  const TensorView &va = *a.view, &vb = *b.view, &vo = *out.view;
  MT_ROUTE_DEVICE(op, va, cuda_kernel(ctx, va, vb, vo));
  DispatchFloat(va.dtype, [&](auto tag) {
    if constexpr (std::is_invocable_v<Fn, const float*, const float*, float*, int64_t>) {
      MapBinaryRanges<decltype(tag)>(ctx, va, vb, vo, fn);
    } else {
      MapBinary<decltype(tag)>(ctx, va, vb, vo, fn);
    }
  });
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ELEMENTWISE_LOOPS_H_
