#include "core/ops/swiglu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/activation_check.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/swiglu_simd.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace {

using internal::DispatchFloat;

constexpr int64_t kChunkElements = 1 << 14;
// bf16 and f16 elements are widened to f32 this many at a time.
constexpr int64_t kBlock = 1024;

template <typename T>
void SwiGluCpu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
               const TensorView& y) {
  const T* pg = gate.data_as<T>();
  const T* pu = up.data_as<T>();
  T* py = y.data_as<T>();
  ParallelFor(ctx.pool, gate.numel(), kChunkElements, [&](int64_t i0, int64_t i1) {
    if constexpr (std::is_same_v<T, float>) {
      internal::SwiGluRange(pg + i0, pu + i0, py + i0, i1 - i0);
    } else {
      float g[kBlock], u[kBlock];
      for (int64_t b = i0; b < i1; b += kBlock) {
        const int64_t n = std::min(kBlock, i1 - b);
        internal::ToF32(pg + b, n, g);
        internal::ToF32(pu + b, n, u);
        internal::SwiGluRange(g, u, g, n);
        internal::FromF32(g, n, py + b);
      }
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
    if constexpr (std::is_same_v<T, float>) {
      internal::SwiGluGradRange(pg + i0, pu + i0, pdy + i0, pdg + i0, pdu + i0, i1 - i0);
    } else {
      // All three inputs are widened before either output is written: the outputs may alias them.
      float g[kBlock], u[kBlock], d[kBlock];
      for (int64_t b = i0; b < i1; b += kBlock) {
        const int64_t n = std::min(kBlock, i1 - b);
        internal::ToF32(pg + b, n, g);
        internal::ToF32(pu + b, n, u);
        internal::ToF32(pdy + b, n, d);
        internal::SwiGluGradRange(g, u, d, g, u, n);
        internal::FromF32(g, n, pdg + b);
        internal::FromF32(u, n, pdu + b);
      }
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
