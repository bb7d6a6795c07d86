#include "core/ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/fast_math.h"
#include "core/ops/reduce_simd.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace ops {
namespace {

// Elements per ParallelFor chunk.
constexpr int64_t kGrain = 1 << 14;

using internal::DispatchFloat;

template <typename T>
void SoftmaxCpu(const ExecContext& ctx, const TensorView& x, const TensorView& y,
                const SoftmaxOptions& options) {
  const int64_t Tk = x.dim(-1);
  const int64_t Tq = x.dim(-2);
  const int64_t R = Tk == 0 ? 0 : x.numel() / Tk;
  const T* px = x.data_as<T>();
  T* py = y.data_as<T>();
  const int32_t* mask =
      options.padding_mask == nullptr ? nullptr : options.padding_mask->data_as<int32_t>();
  // Rows per leading index b (the padding mask's row).
  const int64_t rows_per_b = (mask == nullptr || R == 0) ? 1 : R / x.dim(0);
  const bool causal = options.causal == CausalMask::kYes;
  const float scale = options.scale;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  ParallelFor(ctx.pool, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(Tk, 1)),
              [&](int64_t begin, int64_t end) {
                std::vector<float> s(Tk);
                for (int64_t r = begin; r < end; ++r) {
                  const T* in = px + r * Tk;
                  T* out = py + r * Tk;
                  // Keys [0, kend) pass the causal mask; the padding mask removes more (their
                  // scores become -inf, whose terms are 0).
                  int64_t kend = Tk;
                  if (causal) kend = std::clamp<int64_t>(r % Tq + (Tk - Tq) + 1, 0, Tk);
                  const int32_t* m = mask == nullptr ? nullptr : mask + (r / rows_per_b) * Tk;
                  for (int64_t j = 0; j < kend; ++j) s[j] = scale * ToFloat(in[j]);
                  if (m != nullptr) {
                    for (int64_t j = 0; j < kend; ++j) s[j] = m[j] != 0 ? s[j] : -kInf;
                  }
                  const float mx = internal::MaxF32(s.data(), kend);
                  if (mx == -kInf) {
                    // Nothing to attend to (every key masked, or every score -inf).
                    for (int64_t j = 0; j < Tk; ++j) out[j] = FromFloat<T>(0.0f);
                    continue;
                  }
                  internal::ExpTerms(s.data(), 1.0f, mx, kend, s.data());
                  const float inv = 1.0f / static_cast<float>(internal::SumF32(s.data(), kend));
                  for (int64_t j = 0; j < kend; ++j) out[j] = FromFloat<T>(s[j] * inv);
                  for (int64_t j = kend; j < Tk; ++j) out[j] = FromFloat<T>(0.0f);
                }
              });
}

template <typename T>
void SoftmaxBackwardCpu(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                        const TensorView& dx, float scale) {
  const int64_t Tk = y.dim(-1);
  const int64_t R = Tk == 0 ? 0 : y.numel() / Tk;
  const T* py = y.data_as<T>();
  const T* pdy = dy.data_as<T>();
  T* pdx = dx.data_as<T>();
  ParallelFor(ctx.pool, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(Tk, 1)),
              [&](int64_t begin, int64_t end) {
                std::vector<float> yr(Tk), dyr(Tk);
                for (int64_t r = begin; r < end; ++r) {
                  for (int64_t j = 0; j < Tk; ++j) {
                    yr[j] = ToFloat(py[r * Tk + j]);
                    dyr[j] = ToFloat(pdy[r * Tk + j]);
                  }
                  const float dot = static_cast<float>(internal::DotF32(yr.data(), dyr.data(), Tk));
                  T* out = pdx + r * Tk;
                  for (int64_t j = 0; j < Tk; ++j) {
                    out[j] = FromFloat<T>(scale * yr[j] * (dyr[j] - dot));
                  }
                }
              });
}

// Contiguous float tensors of the first's dtype, shape and device, rank >= 2, and a finite scale.
absl::Status CheckSoftmaxOperands(absl::string_view op, std::initializer_list<NamedView> ts,
                                  float scale) {
  RETURN_IF_ERROR(CheckMatching(op, ts, kFloatDTypes));
  const NamedView& first = *ts.begin();
  if (first.view->rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", first.name, " (",
                                                   first.view->DebugString(),
                                                   ") must have rank >= 2 ([..., Tq, Tk])"));
  }
  if (!std::isfinite(scale)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": scale = ", scale, " is not finite"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Softmax(const ExecContext& ctx, const TensorView& x, const TensorView& y,
                     const SoftmaxOptions& options) {
  constexpr absl::string_view kOp = "Softmax";
  RETURN_IF_ERROR(CheckSoftmaxOperands(kOp, {{"x", &x}, {"y", &y}}, options.scale));
  if (options.padding_mask != nullptr) {
    const TensorView& mask = *options.padding_mask;
    RETURN_IF_ERROR(CheckContiguous(kOp, "padding_mask", mask));
    RETURN_IF_ERROR(CheckDType(kOp, "padding_mask", mask, {DType::kI32}));
    RETURN_IF_ERROR(CheckDeviceOf(kOp, {"padding_mask", &mask}, {"x", &x}));
    if (x.rank() < 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": a padding mask needs x of rank >= 3 ([B, ..., Tq, Tk]), got ", x.DebugString()));
    }
    RETURN_IF_ERROR(CheckShape(kOp, "padding_mask", mask, {x.dim(0), x.dim(-1)}));
  }
  MT_ROUTE_DEVICE(kOp, x,
                  cuda::Softmax(ctx, x, y, options.scale, options.causal == CausalMask::kYes,
                                options.padding_mask));
  DispatchFloat(x.dtype, [&](auto tag) { SoftmaxCpu<decltype(tag)>(ctx, x, y, options); });
  return absl::OkStatus();
}

absl::Status SoftmaxBackward(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                             const TensorView& dx, float scale) {
  constexpr absl::string_view kOp = "SoftmaxBackward";
  RETURN_IF_ERROR(CheckSoftmaxOperands(kOp, {{"y", &y}, {"dy", &dy}, {"dx", &dx}}, scale));
  MT_ROUTE_DEVICE(kOp, y, cuda::SoftmaxBackward(ctx, y, dy, dx, scale));
  DispatchFloat(y.dtype,
                [&](auto tag) { SoftmaxBackwardCpu<decltype(tag)>(ctx, y, dy, dx, scale); });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
