// FusedAttention and FusedAttentionBackward: argument checks, then dispatch by device to the CPU
// kernels (attention_cpu.h) or the CUDA launchers (core/cuda/attention.cu).
#include "core/ops/attention.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/attention_cpu.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/dropout_cuda.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace {

using Problem = internal::AttentionProblem;

// Checks everything both directions share and fills `p` (masks and dropout from args).
// `q_like` are [B, NH, Tq, D] and `k_like` [B, G, Tk, D] (G = k.dim(1), dividing NH), of q's
// float dtype and device;
// `inputs` are read (q, k, v, then out, dout, lse in the backward); `outputs` are written.
absl::Status CheckAttention(absl::string_view op, const TensorView& q, const TensorView& k,
                            const TensorView& lse, const AttentionArgs& args,
                            std::initializer_list<NamedView> q_like,
                            std::initializer_list<NamedView> k_like,
                            std::initializer_list<NamedView> inputs,
                            std::initializer_list<NamedView> outputs, Problem* p) {
  const NamedView qn{"q", &q};
  RETURN_IF_ERROR(CheckRank(op, "q", q, 4));
  RETURN_IF_ERROR(CheckRank(op, "k", k, 4));
  const int64_t B = q.dim(0), NH = q.dim(1), Tq = q.dim(2), D = q.dim(3), G = k.dim(1),
                Tk = k.dim(2);
  if (G < 1 ? NH != 0 : NH % G != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": k ", k.DebugString(), " has ", G,
                                                   " key/value heads, which do not divide the ", NH,
                                                   " query heads of q ", q.DebugString()));
  }
  RETURN_IF_ERROR(CheckMatching(op, qn, q_like, kFloatDTypes, {B, NH, Tq, D}));
  RETURN_IF_ERROR(CheckMatching(op, qn, k_like, kFloatDTypes, {B, G, Tk, D}));
  RETURN_IF_ERROR(CheckContiguous(op, "lse", lse));
  RETURN_IF_ERROR(CheckDTypeIs(op, "lse", lse, DType::kF32));
  RETURN_IF_ERROR(CheckDeviceOf(op, {"lse", &lse}, qn));
  RETURN_IF_ERROR(CheckShape(op, "lse", lse, {B, NH, Tq}));
  if (!std::isfinite(args.scale)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": scale = ", args.scale, " is not finite"));
  }
  if (args.padding_mask != nullptr) {
    const TensorView& mask = *args.padding_mask;
    RETURN_IF_ERROR(CheckContiguous(op, "padding_mask", mask));
    RETURN_IF_ERROR(CheckDType(op, "padding_mask", mask, {DType::kI32}));
    RETURN_IF_ERROR(CheckDeviceOf(op, {"padding_mask", &mask}, qn));
    RETURN_IF_ERROR(CheckShape(op, "padding_mask", mask, {B, Tk}));
  }
  RETURN_IF_ERROR(CheckDropoutArgs(op, args.dropout));
  RETURN_IF_ERROR(CheckNoOverlap(op, outputs, inputs));
  p->B = B;
  p->NH = NH;
  p->G = G;
  p->Tq = Tq;
  p->Tk = Tk;
  p->D = D;
  p->scale = args.scale;
  p->causal = args.causal == CausalMask::kYes;
  p->mask = args.padding_mask == nullptr || !q.device.is_cpu()
                ? nullptr
                : args.padding_mask->data_as<int32_t>();
  p->dropout = args.dropout.p > 0.0f ? &args.dropout : nullptr;
  p->keep_scale = 1.0f / (1.0f - args.dropout.p);
  return absl::OkStatus();
}

// The launch parameters of the CUDA kernels (the padding mask's pointer is filled in there).
cuda::AttentionParams CudaParams(const Problem& p, const AttentionArgs& args) {
  cuda::AttentionParams c;
  c.batch_heads = p.B * p.NH;
  c.heads = p.NH;
  c.groups = p.G;
  c.tq = p.Tq;
  c.tk = p.Tk;
  c.d = p.D;
  c.scale = p.scale;
  c.causal = p.causal;
  c.dropout = internal::CudaDropoutParams(args.dropout);  // Its scale is p.keep_scale.
  return c;
}

}  // namespace

absl::Status FusedAttention(const ExecContext& ctx, const TensorView& q, const TensorView& k,
                            const TensorView& v, const AttentionArgs& args, const TensorView& out,
                            const TensorView& lse) {
  constexpr absl::string_view kOp = "FusedAttention";
  Problem p;
  RETURN_IF_ERROR(CheckAttention(kOp, q, k, lse, args, {{"q", &q}, {"out", &out}},
                                 {{"k", &k}, {"v", &v}}, {{"q", &q}, {"k", &k}, {"v", &v}},
                                 {{"out", &out}, {"lse", &lse}}, &p));
  MT_ROUTE_DEVICE(
      kOp, q, cuda::FusedAttention(ctx, q, k, v, args.padding_mask, CudaParams(p, args), out, lse));
  internal::FusedAttentionCpu(ctx, p, q, k, v, out, lse);
  return absl::OkStatus();
}

absl::Status FusedAttentionBackward(const ExecContext& ctx, const TensorView& q,
                                    const TensorView& k, const TensorView& v, const TensorView& out,
                                    const TensorView& dout, const TensorView& lse,
                                    const AttentionArgs& args, const TensorView& dq,
                                    const TensorView& dk, const TensorView& dv) {
  constexpr absl::string_view kOp = "FusedAttentionBackward";
  Problem p;
  RETURN_IF_ERROR(CheckAttention(
      kOp, q, k, lse, args, {{"q", &q}, {"out", &out}, {"dout", &dout}, {"dq", &dq}},
      {{"k", &k}, {"v", &v}, {"dk", &dk}, {"dv", &dv}},
      {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"dout", &dout}, {"lse", &lse}},
      {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}}, &p));
  MT_ROUTE_DEVICE(kOp, q,
                  cuda::FusedAttentionBackward(ctx, q, k, v, out, dout, lse, args.padding_mask,
                                               CudaParams(p, args), dq, dk, dv));
  internal::FusedAttentionBackwardCpu(ctx, p, q, k, v, out, dout, lse, dq, dk, dv);
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
