#include "core/ops/attention_merge.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace mt {
namespace ops {
namespace {

using internal::DispatchFloat;

template <typename T>
void MergeCpu(const ExecContext& ctx, int64_t rows, int64_t D, T* out, float* lse, const T* out_b,
              const float* lse_b) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  ParallelFor(ctx.pool, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(D, 1)),
              [&](int64_t r0, int64_t r1) {
                for (int64_t r = r0; r < r1; ++r) {
                  const double la = lse[r], lb = lse_b[r];
                  if (lb == kNegInf) continue;  // Nothing visible in b: keep a.
                  const double m = std::max(la, lb);
                  const double wa = la == kNegInf ? 0.0 : std::exp(la - m);
                  const double wb = std::exp(lb - m);
                  const double s = wa + wb;
                  T* o = out + r * D;
                  const T* ob = out_b + r * D;
                  for (int64_t d = 0; d < D; ++d) {
                    const double v = (wa * static_cast<double>(ToFloat(o[d])) +
                                      wb * static_cast<double>(ToFloat(ob[d]))) /
                                     s;
                    o[d] = FromFloat<T>(static_cast<float>(v));
                  }
                  lse[r] = static_cast<float>(m + std::log(s));
                }
              });
}

}  // namespace

absl::Status AttentionMerge(const ExecContext& ctx, const TensorView& out, const TensorView& lse,
                            const TensorView& out_b, const TensorView& lse_b) {
  constexpr const char* kOp = "AttentionMerge";
  RETURN_IF_ERROR(CheckMinRank(kOp, "out", out, 2));
  const NamedView on{"out", &out};
  RETURN_IF_ERROR(CheckMatching(kOp, on, {on, {"out_b", &out_b}}, kFloatDTypes, out.shape));
  Shape rows_shape(out.shape.begin(), out.shape.end() - 1);
  for (const NamedView& l : {NamedView{"lse", &lse}, NamedView{"lse_b", &lse_b}}) {
    RETURN_IF_ERROR(CheckContiguous(kOp, l.name, *l.view));
    RETURN_IF_ERROR(CheckDTypeIs(kOp, l.name, *l.view, DType::kF32));
    RETURN_IF_ERROR(CheckDeviceOf(kOp, l, on));
    RETURN_IF_ERROR(CheckShape(kOp, l.name, *l.view, rows_shape));
  }
  RETURN_IF_ERROR(CheckNoOverlap(kOp, {on, {"lse", &lse}}, {{"out_b", &out_b}, {"lse_b", &lse_b}}));
  RETURN_IF_ERROR(CheckNoOverlap(kOp, {on}, {{"lse", &lse}}));
  if (!out.device.is_cpu()) return UnsupportedDevice(kOp, out.device);
  const int64_t D = out.dim(-1), rows = D == 0 ? 0 : out.numel() / D;
  DispatchFloat(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    MergeCpu<T>(ctx, rows, D, out.data_as<T>(), lse.data_as<float>(), out_b.data_as<T>(),
                lse_b.data_as<float>());
  });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
