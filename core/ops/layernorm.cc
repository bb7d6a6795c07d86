#include "core/ops/layernorm.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/layernorm_simd.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace ops {
namespace {

// Elements per ParallelFor chunk.
constexpr int64_t kGrain = 1 << 14;
// The backward sums dgamma/dbeta over fixed row blocks (a function of the row count only), each
// sequentially, then over the blocks in order: bitwise the same result for any pool.
constexpr int64_t kMaxRowBlocks = 128;
constexpr int64_t kMinRowsPerBlock = 16;

using internal::DispatchFloat;

template <typename T>
std::vector<float> ToFloatVector(const TensorView& t) {
  std::vector<float> out(t.numel());
  internal::ToF32(t.data_as<T>(), t.numel(), out.data());
  return out;
}

std::vector<float> ParamToFloat(const TensorView& t) {
  std::vector<float> out;
  DispatchFloat(t.dtype, [&](auto tag) { out = ToFloatVector<decltype(tag)>(t); });
  return out;
}

template <typename T>
void LayerNormCpu(const ExecContext& ctx, const TensorView& x, const std::vector<float>& gamma,
                  const std::vector<float>& beta, float eps, const TensorView& y,
                  const TensorView& mean, const TensorView& rstd) {
  const int64_t C = x.dim(-1);
  const int64_t R = x.numel() / C;
  const T* px = x.data_as<T>();
  T* py = y.data_as<T>();
  float* pmean = mean.data_as<float>();
  float* prstd = rstd.data_as<float>();
  ParallelFor(ctx.pool, R, std::max<int64_t>(1, kGrain / C), [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      for (int64_t r = begin; r < end; ++r) {
        internal::LayerNormRow(px + r * C, gamma.data(), beta.data(), eps, C, py + r * C, &pmean[r],
                               &prstd[r]);
      }
    } else {
      std::vector<float> row(C);
      for (int64_t r = begin; r < end; ++r) {
        internal::ToF32(px + r * C, C, row.data());
        internal::LayerNormRow(row.data(), gamma.data(), beta.data(), eps, C, row.data(), &pmean[r],
                               &prstd[r]);
        internal::FromF32(row.data(), C, py + r * C);
      }
    }
  });
}

template <typename P>
void StoreParam(const std::vector<float>& v, const TensorView& t) {
  P* p = t.data_as<P>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = FromFloat<P>(v[i]);
}

template <typename T>
void LayerNormBackwardCpu(const ExecContext& ctx, const TensorView& x,
                          const std::vector<float>& gamma, const TensorView& mean,
                          const TensorView& rstd, const TensorView& dy, const TensorView& dx,
                          std::vector<float>* dgamma, std::vector<float>* dbeta) {
  const int64_t C = x.dim(-1);
  const int64_t R = x.numel() / C;
  dgamma->assign(C, 0.0f);
  dbeta->assign(C, 0.0f);
  if (R == 0) return;
  const T* px = x.data_as<T>();
  const T* pdy = dy.data_as<T>();
  T* pdx = dx.data_as<T>();
  const float* pmean = mean.data_as<float>();
  const float* prstd = rstd.data_as<float>();
  const int64_t blocks = std::min(kMaxRowBlocks, (R + kMinRowsPerBlock - 1) / kMinRowsPerBlock);
  const int64_t rows_per_block = (R + blocks - 1) / blocks;
  std::vector<float> part_dgamma(blocks * C), part_dbeta(blocks * C);  // [blocks, C]
  const int64_t grain = std::max<int64_t>(1, kGrain / (rows_per_block * C));
  ParallelFor(ctx.pool, blocks, grain, [&](int64_t begin, int64_t end) {
    // f32 copies of a row of x and dy, and its dx (16-bit dtypes only).
    std::vector<float> xf, dyf, dxf;
    if constexpr (!std::is_same_v<T, float>) {
      xf.resize(C);
      dyf.resize(C);
      dxf.resize(C);
    }
    for (int64_t blk = begin; blk < end; ++blk) {
      float* dgam = part_dgamma.data() + blk * C;
      float* dbet = part_dbeta.data() + blk * C;
      std::fill(dgam, dgam + C, 0.0f);
      std::fill(dbet, dbet + C, 0.0f);
      const int64_t r1 = std::min(R, (blk + 1) * rows_per_block);
      for (int64_t r = blk * rows_per_block; r < r1; ++r) {
        if constexpr (std::is_same_v<T, float>) {
          internal::LayerNormGradRow(px + r * C, pdy + r * C, gamma.data(), pmean[r], prstd[r], C,
                                     pdx + r * C, dgam, dbet);
        } else {
          internal::ToF32(px + r * C, C, xf.data());
          internal::ToF32(pdy + r * C, C, dyf.data());
          internal::LayerNormGradRow(xf.data(), dyf.data(), gamma.data(), pmean[r], prstd[r], C,
                                     dxf.data(), dgam, dbet);
          internal::FromF32(dxf.data(), C, pdx + r * C);
        }
      }
    }
  });
  ParallelFor(ctx.pool, C, kGrain / blocks + 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      float sg = 0.0f, sb = 0.0f;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        sg += part_dgamma[blk * C + c];
        sb += part_dbeta[blk * C + c];
      }
      (*dgamma)[c] = sg;
      (*dbeta)[c] = sb;
    }
  });
}

// Checks shared by forward and backward: the activations (`acts`, x first) are contiguous float
// tensors of one dtype and shape with rank >= 1 and C >= 1; `params` are [C] in f32 or x's dtype,
// all of one dtype; `stats` are f32 with R elements, shaped [R] or like x without its last dim;
// everything on x's device.
absl::Status CheckLayerNormArgs(absl::string_view op, std::initializer_list<NamedView> acts,
                                std::initializer_list<NamedView> params,
                                std::initializer_list<NamedView> stats) {
  const NamedView& xn = *acts.begin();
  const TensorView& x = *xn.view;
  RETURN_IF_ERROR(CheckMatching(op, acts, kFloatDTypes));
  if (x.rank() < 1 || x.dim(-1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": x (", x.DebugString(), ") must have rank >= 1 and a non-empty last dimension"));
  }
  const int64_t C = x.dim(-1);
  for (const NamedView& n : params) {
    RETURN_IF_ERROR(CheckContiguous(op, n.name, *n.view));
    RETURN_IF_ERROR(CheckDeviceOf(op, n, xn));
    if (n.view->dtype != DType::kF32 && n.view->dtype != x.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", n.name, " has dtype ",
                                                     DTypeName(n.view->dtype), ", expected f32 or ",
                                                     DTypeName(x.dtype), " (the dtype of x)"));
    }
    RETURN_IF_ERROR(CheckDTypeOf(op, n, *params.begin()));
    RETURN_IF_ERROR(CheckShape(op, n.name, *n.view, {C}));
  }
  const int64_t R = x.numel() / C;
  const Shape leading(x.shape.begin(), x.shape.end() - 1);
  for (const NamedView& n : stats) {
    RETURN_IF_ERROR(CheckContiguous(op, n.name, *n.view));
    RETURN_IF_ERROR(CheckDeviceOf(op, n, xn));
    RETURN_IF_ERROR(CheckDTypeIs(op, n.name, *n.view, DType::kF32));
    const TensorView& t = *n.view;
    if (!(t.rank() == 1 && t.dim(0) == R) &&
        absl::Span<const int64_t>(t.shape) != absl::Span<const int64_t>(leading)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", n.name, " has shape ",
                                                     ShapeToString(t.shape), ", expected [", R,
                                                     "] or ", ShapeToString(leading)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LayerNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                       const TensorView& beta, float eps, const TensorView& y,
                       const TensorView& mean, const TensorView& rstd) {
  constexpr absl::string_view kOp = "LayerNorm";
  RETURN_IF_ERROR(CheckLayerNormArgs(kOp, {{"x", &x}, {"y", &y}},
                                     {{"gamma", &gamma}, {"beta", &beta}},
                                     {{"mean", &mean}, {"rstd", &rstd}}));
  if (!(std::isfinite(eps) && eps >= 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": eps = ", eps, " must be finite and non-negative"));
  }
  MT_ROUTE_DEVICE(kOp, x, cuda::LayerNorm(ctx, x, gamma, beta, eps, y, mean, rstd));
  const std::vector<float> g = ParamToFloat(gamma), b = ParamToFloat(beta);
  DispatchFloat(x.dtype,
                [&](auto tag) { LayerNormCpu<decltype(tag)>(ctx, x, g, b, eps, y, mean, rstd); });
  return absl::OkStatus();
}

absl::Status LayerNormBackward(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                               const TensorView& mean, const TensorView& rstd, const TensorView& dy,
                               const TensorView& dx, const TensorView& dgamma,
                               const TensorView& dbeta) {
  constexpr absl::string_view kOp = "LayerNormBackward";
  RETURN_IF_ERROR(CheckLayerNormArgs(kOp, {{"x", &x}, {"dy", &dy}, {"dx", &dx}},
                                     {{"gamma", &gamma}, {"dgamma", &dgamma}, {"dbeta", &dbeta}},
                                     {{"mean", &mean}, {"rstd", &rstd}}));
  MT_ROUTE_DEVICE(kOp, x,
                  cuda::LayerNormBackward(ctx, x, gamma, mean, rstd, dy, dx, dgamma, dbeta));
  const std::vector<float> g = ParamToFloat(gamma);
  std::vector<float> dg, db;
  DispatchFloat(x.dtype, [&](auto tag) {
    LayerNormBackwardCpu<decltype(tag)>(ctx, x, g, mean, rstd, dy, dx, &dg, &db);
  });
  DispatchFloat(dgamma.dtype, [&](auto tag) {
    StoreParam<decltype(tag)>(dg, dgamma);
    StoreParam<decltype(tag)>(db, dbeta);
  });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
