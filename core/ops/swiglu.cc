#include "core/ops/swiglu.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/activation_check.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace {

using internal::DispatchFloat;

constexpr int64_t kChunkElements = 1 << 14;

inline float Sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

template <typename T>
void SwiGluCpu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
               const TensorView& y) {
  const T* pg = gate.data_as<T>();
  const T* pu = up.data_as<T>();
  T* py = y.data_as<T>();
  ParallelFor(ctx.pool, gate.numel(), kChunkElements, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float g = ToFloat(pg[i]);
      py[i] = FromFloat<T>(g * Sigmoid(g) * ToFloat(pu[i]));
    }
  });
}

template <typename T>
void SwiGluBackwardCpu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                       const TensorView& dy, const TensorView& dgate, const TensorView& dup) {
  const T* pg = gate.data_as<T>();
  const T* pu = up.data_as<T>();
  const T* pdy = dy.data_as<T>();
  T* pdg = dgate.data_as<T>();
  T* pdu = dup.data_as<T>();
  ParallelFor(ctx.pool, gate.numel(), kChunkElements, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      // Read all three inputs before writing: the outputs may alias them.
      const float g = ToFloat(pg[i]), u = ToFloat(pu[i]), d = ToFloat(pdy[i]);
      const float s = Sigmoid(g);
      pdg[i] = FromFloat<T>(d * u * (s * (1.0f + g * (1.0f - s))));
      pdu[i] = FromFloat<T>(d * (g * s));
    }
  });
}

}  // namespace

absl::Status SwiGlu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                    const TensorView& y) {
  constexpr absl::string_view kOp = "SwiGlu";
  RETURN_IF_ERROR(internal::CheckFloatActivations(kOp, {{"gate", &gate}, {"up", &up}, {"y", &y}}));
  MT_ROUTE_DEVICE(kOp, gate, cuda::SwiGlu(ctx, gate, up, y));
  DispatchFloat(gate.dtype, [&](auto tag) { SwiGluCpu<decltype(tag)>(ctx, gate, up, y); });
  return absl::OkStatus();
}

absl::Status SwiGluBackward(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                            const TensorView& dy, const TensorView& dgate, const TensorView& dup) {
  constexpr absl::string_view kOp = "SwiGluBackward";
  RETURN_IF_ERROR(internal::CheckFloatActivations(
      kOp, {{"gate", &gate}, {"up", &up}, {"dy", &dy}, {"dgate", &dgate}, {"dup", &dup}}));
  if (dgate.data == dup.data && dgate.numel() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": dgate and dup are the same memory; give them separate buffers"));
  }
  MT_ROUTE_DEVICE(kOp, gate, cuda::SwiGluBackward(ctx, gate, up, dy, dgate, dup));
  DispatchFloat(gate.dtype,
                [&](auto tag) { SwiGluBackwardCpu<decltype(tag)>(ctx, gate, up, dy, dgate, dup); });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
