#include "core/ops/tanh.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise_loops.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace ops {
namespace {

using internal::RunBinary;
using internal::RunUnary;

inline float TanhF(float x) { return std::tanh(x); }
// (1 - t)(1 + t) rather than 1 - t^2: no cancellation error where |t| is close to 1.
inline float TanhGrad(float t, float dy) { return dy * ((1.0f - t) * (1.0f + t)); }

}  // namespace

absl::Status Tanh(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  return RunUnary("Tanh", ctx, {"x", &x}, {"y", &y}, &cuda::Tanh, TanhF);
}

absl::Status TanhBackward(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                          const TensorView& dx) {
  return RunBinary("TanhBackward", ctx, {"y", &y}, {"dy", &dy}, {"dx", &dx}, &cuda::TanhBackward,
                   TanhGrad);
}

}  // namespace ops
}  // namespace mt
