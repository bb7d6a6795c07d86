// The element-wise CPU loops of core/ops (internal): y = fn(x) and out = fn(a, b) element by
// element, in f32 math (each element converted from and rounded back to T), split over the
// context's pool.
#ifndef MT_CORE_OPS_ELEMENTWISE_LOOPS_H_
#define MT_CORE_OPS_ELEMENTWISE_LOOPS_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/exec_context.h"
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

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ELEMENTWISE_LOOPS_H_
