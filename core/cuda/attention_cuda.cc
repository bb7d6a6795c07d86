// Host side of the fused attention op (core/ops/attention.h): entry checks and launches. The
// kernels are in attention.cu.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/cuda/op_util.h"
#include "core/cuda/ops_cuda.h"
#include "core/status.h"

namespace mt {
namespace cuda {

namespace {

absl::Status CheckHeadDim(absl::string_view op, int64_t d) {
  if (d > kAttentionMaxHeadDim) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": head dim D = ", d, " exceeds the CUDA kernels' limit of ",
                     kAttentionMaxHeadDim, "; split the heads further or run on the CPU"));
  }
  return absl::OkStatus();
}

const int32_t* MaskData(const TensorView* padding_mask) {
  return padding_mask == nullptr ? nullptr : padding_mask->data_as<int32_t>();
}

}  // namespace

absl::Status FusedAttention(const ExecContext& ctx, const TensorView& q, const TensorView& k,
                            const TensorView& v, const TensorView* padding_mask,
                            const AttentionParams& params, const TensorView& out,
                            const TensorView& lse) {
  constexpr absl::string_view kOp = "FusedAttention";
  RETURN_IF_ERROR(
      Enter(kOp, ctx, q.device, MT_OPERANDS(q, k, v, padding_mask, out, lse), Needs::kNothing));
  RETURN_IF_ERROR(CheckHeadDim(kOp, params.d));
  AttentionParams p = params;
  p.padding_mask = MaskData(padding_mask);
  return LaunchStatus(kOp, LaunchFusedAttention(Elem(q.dtype), q.data, k.data, v.data, out.data,
                                                lse.data_as<float>(), p, ctx.cuda_stream));
}

absl::Status FusedAttentionBackward(const ExecContext& ctx, const TensorView& q,
                                    const TensorView& k, const TensorView& v, const TensorView& out,
                                    const TensorView& dout, const TensorView& lse,
                                    const TensorView* padding_mask, const AttentionParams& params,
                                    const TensorView& dq, const TensorView& dk,
                                    const TensorView& dv) {
  constexpr absl::string_view kOp = "FusedAttentionBackward";
  RETURN_IF_ERROR(Enter(kOp, ctx, q.device,
                        MT_OPERANDS(q, k, v, out, dout, lse, padding_mask, dq, dk, dv),
                        Needs::kNothing));
  RETURN_IF_ERROR(CheckHeadDim(kOp, params.d));
  AttentionParams p = params;
  p.padding_mask = MaskData(padding_mask);
  return LaunchStatus(
      kOp, LaunchFusedAttentionBackward(Elem(q.dtype), q.data, k.data, v.data, out.data, dout.data,
                                        lse.data_as<float>(), dq.data, dk.data, dv.data, p,
                                        ctx.cuda_stream));
}

}  // namespace cuda
}  // namespace mt
