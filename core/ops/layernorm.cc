#include "core/ops/layernorm.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
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

// Sum with eight interleaved accumulators: vectorisable, and its rounding error grows with n / 8.
float Sum(const float* v, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += v[i + k];
  }
  for (int k = 0; i < n; ++i, ++k) acc[k] += v[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

template <typename T>
void LoadRow(const T* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ToFloat(src[i]);
}

template <typename T>
std::vector<float> ToFloatVector(const TensorView& t) {
  std::vector<float> out(t.numel());
  LoadRow(t.data_as<T>(), t.numel(), out.data());
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
    std::vector<float> row(C);
    for (int64_t r = begin; r < end; ++r) {
      LoadRow(px + r * C, C, row.data());
      // Two passes: the variance of the centred values does not cancel catastrophically.
      const float mu = Sum(row.data(), C) / static_cast<float>(C);
      for (int64_t c = 0; c < C; ++c) row[c] -= mu;
      float sq[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t c = 0;
      for (; c + 8 <= C; c += 8) {
        for (int k = 0; k < 8; ++k) sq[k] += row[c + k] * row[c + k];
      }
      for (int k = 0; c < C; ++c, ++k) sq[k] += row[c] * row[c];
      const float var =
          (((sq[0] + sq[4]) + (sq[1] + sq[5])) + ((sq[2] + sq[6]) + (sq[3] + sq[7]))) /
          static_cast<float>(C);
      const float rs = 1.0f / std::sqrt(var + eps);
      pmean[r] = mu;
      prstd[r] = rs;
      T* out = py + r * C;
      for (int64_t j = 0; j < C; ++j) out[j] = FromFloat<T>(row[j] * rs * gamma[j] + beta[j]);
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
  const float inv_c = 1.0f / static_cast<float>(C);
  const int64_t grain = std::max<int64_t>(1, kGrain / (rows_per_block * C));
  ParallelFor(ctx.pool, blocks, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> xhat(C), d(C), g(C);
    for (int64_t blk = begin; blk < end; ++blk) {
      float* dgam = part_dgamma.data() + blk * C;
      float* dbet = part_dbeta.data() + blk * C;
      std::fill(dgam, dgam + C, 0.0f);
      std::fill(dbet, dbet + C, 0.0f);
      const int64_t r1 = std::min(R, (blk + 1) * rows_per_block);
      for (int64_t r = blk * rows_per_block; r < r1; ++r) {
        const float mu = pmean[r];
        const float rs = prstd[r];
        LoadRow(px + r * C, C, xhat.data());
        LoadRow(pdy + r * C, C, d.data());
        for (int64_t c = 0; c < C; ++c) {
          xhat[c] = (xhat[c] - mu) * rs;
          dgam[c] += d[c] * xhat[c];
          dbet[c] += d[c];
          g[c] = d[c] * gamma[c];
        }
        const float mean_g = Sum(g.data(), C) * inv_c;
        for (int64_t c = 0; c < C; ++c) d[c] = g[c] * xhat[c];  // d is free now.
        const float mean_gx = Sum(d.data(), C) * inv_c;
        T* out = pdx + r * C;
        for (int64_t c = 0; c < C; ++c) {
          out[c] = FromFloat<T>(rs * (g[c] - mean_g - xhat[c] * mean_gx));
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
