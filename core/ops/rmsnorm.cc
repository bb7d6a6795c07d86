#include "core/ops/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/activation_check.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/reduce_simd.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace {

using internal::DispatchFloat;
using internal::NamedView;

// Rows per ParallelFor chunk are chosen so that a chunk holds about this many elements.
constexpr int64_t kChunkElements = 1 << 14;
// dgamma: each task owns kColumnsPerTask columns and sums them over all rows, in blocks of
// kRowsPerPartial rows (each block sequentially, then the blocks in order): the order depends on
// the shape only, and the f32 error grows with kRowsPerPartial + R / kRowsPerPartial, not with R.
constexpr int64_t kColumnsPerTask = 256;
constexpr int64_t kRowsPerPartial = 64;

// A [C] parameter as f32.
std::vector<float> Widen(const TensorView& t) {
  std::vector<float> out(t.numel());
  DispatchFloat(t.dtype, [&](auto tag) {
    using P = decltype(tag);
    const P* p = t.data_as<P>();
    std::transform(p, p + out.size(), out.begin(), [](P v) { return ToFloat(v); });
  });
  return out;
}

template <typename T>
void RmsNormCpu(const ExecContext& ctx, const TensorView& x, const std::vector<float>& gamma,
                float eps, const TensorView& y, const TensorView& rstd) {
  const int64_t C = x.dim(-1), R = x.numel() / C;
  const T* px = x.data_as<T>();
  T* py = y.data_as<T>();
  float* prstd = rstd.data_as<float>();
  const int64_t grain = std::max<int64_t>(1, kChunkElements / C);
  ParallelFor(ctx.pool, R, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> v(C);
    for (int64_t r = r0; r < r1; ++r) {
      std::transform(px + r * C, px + (r + 1) * C, v.begin(), [](T e) { return ToFloat(e); });
      // The mean square in f64 (reduce_simd.h), rounded once.
      const float ms = static_cast<float>(internal::SumOfSquaresF32(v.data(), C) / C);
      const float rs = 1.0f / std::sqrt(ms + eps);
      prstd[r] = rs;
      for (int64_t c = 0; c < C; ++c) py[r * C + c] = FromFloat<T>(v[c] * rs * gamma[c]);
    }
  });
}

// dx rows: dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * gamma, xhat = x * rstd.
template <typename T>
void RmsNormDxCpu(const ExecContext& ctx, const TensorView& x, const std::vector<float>& gamma,
                  const float* prstd, const TensorView& dy, const TensorView& dx) {
  const int64_t C = x.dim(-1), R = x.numel() / C;
  const T* px = x.data_as<T>();
  const T* pdy = dy.data_as<T>();
  T* pdx = dx.data_as<T>();
  const int64_t grain = std::max<int64_t>(1, kChunkElements / C);
  ParallelFor(ctx.pool, R, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> xhat(C), g(C);
    for (int64_t r = r0; r < r1; ++r) {
      const float rs = prstd[r];
      for (int64_t c = 0; c < C; ++c) {
        xhat[c] = ToFloat(px[r * C + c]) * rs;
        g[c] = ToFloat(pdy[r * C + c]) * gamma[c];
      }
      const float m = static_cast<float>(internal::DotF32(g.data(), xhat.data(), C) / C);
      for (int64_t c = 0; c < C; ++c) pdx[r * C + c] = FromFloat<T>(rs * (g[c] - xhat[c] * m));
    }
  });
}

// dgamma[c] = sum_r dy[r, c] * x[r, c] * rstd[r], rounded once to P. Reads x and dy before the
// caller overwrites dx (which may alias either).
template <typename T, typename P>
void RmsNormDgammaCpu(const ExecContext& ctx, const TensorView& x, const float* prstd,
                      const TensorView& dy, const TensorView& dgamma) {
  const int64_t C = x.dim(-1), R = x.numel() / C;
  const T* px = x.data_as<T>();
  const T* pdy = dy.data_as<T>();
  P* out = dgamma.data_as<P>();
  const int64_t tasks = (C + kColumnsPerTask - 1) / kColumnsPerTask;
  ParallelFor(ctx.pool, tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> total(kColumnsPerTask), partial(kColumnsPerTask);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t c0 = task * kColumnsPerTask, width = std::min(kColumnsPerTask, C - c0);
      std::fill(total.begin(), total.end(), 0.0f);
      for (int64_t rb = 0; rb < R; rb += kRowsPerPartial) {
        std::fill(partial.begin(), partial.end(), 0.0f);
        for (int64_t r = rb; r < std::min(R, rb + kRowsPerPartial); ++r) {
          const T* xr = px + r * C + c0;
          const T* dyr = pdy + r * C + c0;
          for (int64_t c = 0; c < width; ++c)
            partial[c] += ToFloat(dyr[c]) * (ToFloat(xr[c]) * prstd[r]);
        }
        for (int64_t c = 0; c < width; ++c) total[c] += partial[c];
      }
      for (int64_t c = 0; c < width; ++c) out[c0 + c] = FromFloat<P>(total[c]);
    }
  });
}

// x (and the operands in `acts`) [..., C] of one float dtype and shape; `params` [C] in f32 or
// x's dtype, all of one dtype; rstd f32 with R elements, [R] or x's leading shape; one device.
absl::Status CheckRmsNormArgs(absl::string_view op, std::initializer_list<NamedView> acts,
                              std::initializer_list<NamedView> params, const TensorView& rstd) {
  RETURN_IF_ERROR(internal::CheckFloatActivations(op, acts));
  const TensorView& x = *acts.begin()->t;
  if (x.rank() < 1 || x.dim(-1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": x (", x.DebugString(), ") must have rank >= 1 and a non-empty last dimension"));
  }
  const int64_t C = x.dim(-1), R = x.numel() / C;
  const TensorView& p0 = *params.begin()->t;
  for (const NamedView& p : params) {
    RETURN_IF_ERROR(internal::CheckF32Or(op, p, x.dtype, x.device));
    RETURN_IF_ERROR(CheckShape(op, p.name, *p.t, {C}));
    if (p.t->dtype != p0.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", p.name, " has dtype ",
                                                     DTypeName(p.t->dtype), ", expected ",
                                                     DTypeName(p0.dtype), " (that of gamma)"));
    }
  }
  RETURN_IF_ERROR(internal::CheckF32Or(op, {"rstd", &rstd}, DType::kF32, x.device));
  const Shape leading(x.shape.begin(), x.shape.end() - 1);
  if (rstd.shape != leading && !(rstd.rank() == 1 && rstd.dim(0) == R)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": rstd has shape ", ShapeToString(rstd.shape), ", expected [", R, "]",
                     leading.size() == 1 ? "" : absl::StrCat(" or ", ShapeToString(leading))));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                     float eps, const TensorView& y, const TensorView& rstd) {
  constexpr absl::string_view kOp = "RmsNorm";
  RETURN_IF_ERROR(CheckRmsNormArgs(kOp, {{"x", &x}, {"y", &y}}, {{"gamma", &gamma}}, rstd));
  if (!(std::isfinite(eps) && eps >= 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": eps = ", eps, " must be finite and non-negative"));
  }
  MT_ROUTE_DEVICE(kOp, x, cuda::RmsNorm(ctx, x, gamma, eps, y, rstd));
  const std::vector<float> g = Widen(gamma);
  DispatchFloat(x.dtype, [&](auto tag) { RmsNormCpu<decltype(tag)>(ctx, x, g, eps, y, rstd); });
  return absl::OkStatus();
}

absl::Status RmsNormBackward(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                             const TensorView& rstd, const TensorView& dy, const TensorView& dx,
                             const TensorView& dgamma) {
  constexpr absl::string_view kOp = "RmsNormBackward";
  RETURN_IF_ERROR(CheckRmsNormArgs(kOp, {{"x", &x}, {"dy", &dy}, {"dx", &dx}},
                                   {{"gamma", &gamma}, {"dgamma", &dgamma}}, rstd));
  MT_ROUTE_DEVICE(kOp, x, cuda::RmsNormBackward(ctx, x, gamma, rstd, dy, dx, dgamma));
  const std::vector<float> g = Widen(gamma);
  const float* prstd = rstd.data_as<float>();
  DispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    DispatchFloat(dgamma.dtype, [&](auto ptag) {
      RmsNormDgammaCpu<T, decltype(ptag)>(ctx, x, prstd, dy, dgamma);
    });
    RmsNormDxCpu<T>(ctx, x, g, prstd, dy, dx);
  });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
