// Host side of the CUDA ops: entry checks, scratch from the DeviceContext, launchers, and the
// conversion of launch results into Status. The kernels are in the .cu files.
#include "core/cuda/ops_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/cuda/op_util.h"
#include "core/status.h"

namespace mt {
namespace cuda {

namespace {

// Device scratch from ctx.cuda (Enter has checked it is there).
absl::StatusOr<void*> Scratch(absl::string_view op, const ExecContext& ctx, size_t nbytes) {
  absl::StatusOr<void*> p = ctx.cuda->state().Scratch(nbytes);
  if (!p.ok()) return WithOp(op, p.status());
  return p;
}

// Queues a device-to-device copy of x into y unless they are the same memory.
absl::Status CopyIfDistinct(absl::string_view op, const ExecContext& ctx, const TensorView& x,
                            const TensorView& y) {
  if (x.data == y.data || x.nbytes() == 0) return absl::OkStatus();
  MT_OP_CUDA_CALL(
      op, cudaMemcpyAsync(y.data, x.data, x.nbytes(), cudaMemcpyDeviceToDevice, Stream(ctx)));
  return absl::OkStatus();
}

}  // namespace

// ---- Element-wise ----

absl::Status BiasAdd(const ExecContext& ctx, const TensorView& x, const TensorView& bias,
                     const TensorView& y) {
  constexpr absl::string_view kOp = "BiasAdd";
  RETURN_IF_ERROR(Enter(kOp, ctx, x.device, MT_OPERANDS(x, bias, y), Needs::kNothing));
  const int64_t cols = bias.numel();
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  return LaunchStatus(
      kOp, LaunchBiasAdd(Elem(x.dtype), x.data, bias.data, y.data, rows, cols, ctx.cuda_stream));
}

absl::Status BiasGrad(const ExecContext& ctx, const TensorView& dy, const TensorView& dbias) {
  constexpr absl::string_view kOp = "BiasGrad";
  RETURN_IF_ERROR(Enter(kOp, ctx, dy.device, MT_OPERANDS(dy, dbias), Needs::kDeviceContext));
  const int64_t cols = dbias.numel();
  const int64_t rows = cols == 0 ? 0 : dy.numel() / cols;
  const int64_t floats = BiasGradScratchFloats(rows, cols);
  ASSIGN_OR_RETURN(void* scratch, Scratch(kOp, ctx, static_cast<size_t>(floats) * sizeof(float)));
  return LaunchStatus(
      kOp, LaunchBiasGrad(Elem(dy.dtype), Elem(dbias.dtype), dy.data, dbias.data, rows, cols,
                          static_cast<float*>(scratch), ctx.cuda_stream));
}

namespace {
absl::Status Unary(absl::string_view op, const ExecContext& ctx, UnaryOp kind, const TensorView& x,
                   const TensorView& y, float alpha) {
  RETURN_IF_ERROR(Enter(op, ctx, x.device, MT_OPERANDS(x, y), Needs::kNothing));
  return LaunchStatus(
      op, LaunchUnary(Elem(x.dtype), kind, x.data, y.data, x.numel(), alpha, ctx.cuda_stream));
}

absl::Status Binary(absl::string_view op, const ExecContext& ctx, BinaryOp kind,
                    absl::string_view a_name, const TensorView& a, absl::string_view b_name,
                    const TensorView& b, absl::string_view out_name, const TensorView& out) {
  RETURN_IF_ERROR(
      Enter(op, ctx, a.device, {{a_name, &a}, {b_name, &b}, {out_name, &out}}, Needs::kNothing));
  return LaunchStatus(
      op, LaunchBinary(Elem(a.dtype), kind, a.data, b.data, out.data, a.numel(), ctx.cuda_stream));
}
}  // namespace

absl::Status Gelu(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  return Unary("Gelu", ctx, UnaryOp::kGelu, x, y, 0.0f);
}

absl::Status GeluBackward(const ExecContext& ctx, const TensorView& x, const TensorView& dy,
                          const TensorView& dx) {
  return Binary("GeluBackward", ctx, BinaryOp::kGeluBackward, "x", x, "dy", dy, "dx", dx);
}

absl::Status Add(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out) {
  return Binary("Add", ctx, BinaryOp::kAdd, "a", a, "b", b, "out", out);
}

absl::Status Scale(const ExecContext& ctx, const TensorView& x, float alpha, const TensorView& y) {
  return Unary("Scale", ctx, UnaryOp::kScale, x, y, alpha);
}

absl::Status GeluErf(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  return Unary("Gelu", ctx, UnaryOp::kGeluErf, x, y, 0.0f);
}

absl::Status GeluErfBackward(const ExecContext& ctx, const TensorView& x, const TensorView& dy,
                             const TensorView& dx) {
  return Binary("GeluBackward", ctx, BinaryOp::kGeluErfBackward, "x", x, "dy", dy, "dx", dx);
}

absl::Status Tanh(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  return Unary("Tanh", ctx, UnaryOp::kTanh, x, y, 0.0f);
}

absl::Status TanhBackward(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                          const TensorView& dx) {
  return Binary("TanhBackward", ctx, BinaryOp::kTanhBackward, "y", y, "dy", dy, "dx", dx);
}

absl::Status Convert(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  constexpr absl::string_view kOp = "Convert";
  RETURN_IF_ERROR(Enter(kOp, ctx, x.device, MT_OPERANDS(x, y), Needs::kNothing));
  if (x.dtype == y.dtype) return CopyIfDistinct(kOp, ctx, x, y);
  return LaunchStatus(
      kOp, LaunchConvert(Elem(x.dtype), Elem(y.dtype), x.data, y.data, x.numel(), ctx.cuda_stream));
}

absl::Status Fill(const ExecContext& ctx, const TensorView& x, const void* pattern,
                  size_t elem_bytes) {
  constexpr absl::string_view kOp = "Fill";
  RETURN_IF_ERROR(Enter(kOp, ctx, x.device, MT_OPERANDS(x), Needs::kNothing));
  return LaunchStatus(
      kOp, LaunchFill(pattern, static_cast<int>(elem_bytes), x.data, x.numel(), ctx.cuda_stream));
}

absl::Status Dropout(absl::string_view op, const ExecContext& ctx, const TensorView& x,
                     const DropoutParams& params, const TensorView& y) {
  RETURN_IF_ERROR(Enter(op, ctx, x.device, MT_OPERANDS(x, y), Needs::kNothing));
  if (params.p == 0.0f) return CopyIfDistinct(op, ctx, x, y);
  return LaunchStatus(
      op, LaunchDropout(Elem(x.dtype), x.data, y.data, x.numel(), params, ctx.cuda_stream));
}

absl::Status BiasDropoutAdd(const ExecContext& ctx, const TensorView& x, const TensorView* bias,
                            const DropoutParams& params, const TensorView& residual,
                            const TensorView& out) {
  constexpr absl::string_view kOp = "BiasDropoutAdd";
  RETURN_IF_ERROR(Enter(kOp, ctx, x.device, MT_OPERANDS(x, bias, residual, out), Needs::kNothing));
  if (x.numel() == 0) return absl::OkStatus();
  return LaunchStatus(
      kOp,
      LaunchBiasDropoutAdd(Elem(x.dtype), x.data, bias != nullptr ? bias->data : nullptr,
                           residual.data, out.data, x.numel(), x.dim(-1), params, ctx.cuda_stream));
}

// ---- LayerNorm ----

absl::Status LayerNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                       const TensorView& beta, float eps, const TensorView& y,
                       const TensorView& mean, const TensorView& rstd) {
  constexpr absl::string_view kOp = "LayerNorm";
  RETURN_IF_ERROR(
      Enter(kOp, ctx, x.device, MT_OPERANDS(x, gamma, beta, y, mean, rstd), Needs::kNothing));
  const int64_t cols = x.dim(-1);
  const int64_t rows = x.numel() / cols;
  return LaunchStatus(kOp, LaunchLayerNorm(Elem(x.dtype), Elem(gamma.dtype), x.data, gamma.data,
                                           beta.data, eps, y.data, mean.data_as<float>(),
                                           rstd.data_as<float>(), rows, cols, ctx.cuda_stream));
}

absl::Status LayerNormBackward(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                               const TensorView& mean, const TensorView& rstd, const TensorView& dy,
                               const TensorView& dx, const TensorView& dgamma,
                               const TensorView& dbeta) {
  constexpr absl::string_view kOp = "LayerNormBackward";
  RETURN_IF_ERROR(Enter(kOp, ctx, x.device,
                        MT_OPERANDS(x, gamma, mean, rstd, dy, dx, dgamma, dbeta),
                        Needs::kDeviceContext));
  const int64_t cols = x.dim(-1);
  const int64_t rows = x.numel() / cols;
  const int64_t floats = LayerNormBackwardScratchFloats(rows, cols);
  ASSIGN_OR_RETURN(void* scratch, Scratch(kOp, ctx, static_cast<size_t>(floats) * sizeof(float)));
  return LaunchStatus(
      kOp, LaunchLayerNormBackward(Elem(x.dtype), Elem(gamma.dtype), x.data, gamma.data,
                                   mean.data_as<float>(), rstd.data_as<float>(), dy.data, dx.data,
                                   dgamma.data, dbeta.data, rows, cols,
                                   static_cast<float*>(scratch), ctx.cuda_stream));
}

// ---- Softmax ----

absl::Status Softmax(const ExecContext& ctx, const TensorView& x, const TensorView& y, float scale,
                     bool causal, const TensorView* padding_mask) {
  constexpr absl::string_view kOp = "Softmax";
  RETURN_IF_ERROR(Enter(kOp, ctx, x.device, MT_OPERANDS(x, y, padding_mask), Needs::kNothing));
  const int64_t tk = x.dim(-1);
  const int64_t tq = x.dim(-2);
  const int64_t rows = tk == 0 ? 0 : x.numel() / tk;
  const int32_t* mask = padding_mask == nullptr ? nullptr : padding_mask->data_as<int32_t>();
  const int64_t rows_per_b = (mask == nullptr || rows == 0) ? 1 : rows / x.dim(0);
  return LaunchStatus(kOp, LaunchSoftmax(Elem(x.dtype), x.data, y.data, rows, tq, tk, scale, causal,
                                         mask, rows_per_b, ctx.cuda_stream));
}

absl::Status SoftmaxBackward(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                             const TensorView& dx, float scale) {
  constexpr absl::string_view kOp = "SoftmaxBackward";
  RETURN_IF_ERROR(Enter(kOp, ctx, y.device, MT_OPERANDS(y, dy, dx), Needs::kNothing));
  const int64_t tk = y.dim(-1);
  const int64_t rows = tk == 0 ? 0 : y.numel() / tk;
  return LaunchStatus(kOp, LaunchSoftmaxBackward(Elem(y.dtype), y.data, dy.data, dx.data, rows, tk,
                                                 scale, ctx.cuda_stream));
}

// ---- Ids ----

absl::StatusOr<BadId> FindBadId(absl::string_view op, const ExecContext& ctx,
                                absl::string_view name, const TensorView& ids, int64_t lo,
                                int64_t hi, bool allow_ignore) {
  RETURN_IF_ERROR(Enter(op, ctx, ids.device, {{name, &ids}}, Needs::kDeviceContext));
  BadId bad;
  const int64_t count = ids.numel();
  if (count == 0) return bad;
  ASSIGN_OR_RETURN(void* scratch, Scratch(op, ctx, sizeof(unsigned long long)));
  auto* first_bad = static_cast<unsigned long long*>(scratch);
  MT_OP_CUDA_CALL(op, cudaMemsetAsync(first_bad, 0xff, sizeof(*first_bad), Stream(ctx)));
  RETURN_IF_ERROR(LaunchStatus(op, LaunchFindBadId(Id(ids.dtype), ids.data, count, lo, hi,
                                                   allow_ignore, first_bad, ctx.cuda_stream)));
  unsigned long long position = 0;
  RETURN_IF_ERROR(ReadBack(op, ctx, first_bad, sizeof(position), &position));
  if (position == std::numeric_limits<unsigned long long>::max()) return bad;
  bad.position = static_cast<int64_t>(position);
  const size_t elem = DTypeSize(ids.dtype);
  const char* at = static_cast<const char*>(ids.data) + bad.position * elem;
  if (ids.dtype == DType::kI32) {
    int32_t v = 0;
    RETURN_IF_ERROR(ReadBack(op, ctx, at, sizeof(v), &v));
    bad.value = v;
  } else {
    int64_t v = 0;
    RETURN_IF_ERROR(ReadBack(op, ctx, at, sizeof(v), &v));
    bad.value = v;
  }
  return bad;
}

// ---- Embedding ----

absl::Status Embedding(const ExecContext& ctx, const TensorView& ids, const TensorView& table,
                       const TensorView& out, int64_t vocab_start) {
  constexpr absl::string_view kOp = "Embedding";
  RETURN_IF_ERROR(Enter(kOp, ctx, ids.device, MT_OPERANDS(ids, table, out), Needs::kNothing));
  return LaunchStatus(
      kOp, LaunchEmbedding(Id(ids.dtype), static_cast<int>(DTypeSize(table.dtype)), ids.data,
                           table.data, out.data, ids.numel(), table.dim(0), table.dim(1),
                           vocab_start, ctx.cuda_stream));
}

absl::Status EmbeddingBackward(const ExecContext& ctx, const TensorView& ids,
                               const TensorView& dout, const TensorView& dtable,
                               int64_t vocab_start) {
  constexpr absl::string_view kOp = "EmbeddingBackward";
  RETURN_IF_ERROR(
      Enter(kOp, ctx, ids.device, MT_OPERANDS(ids, dout, dtable), Needs::kDeviceContext));
  const int64_t n = ids.numel(), v = dtable.dim(0), c = dtable.dim(1);
  if (n == 0 || v == 0 || c == 0) return absl::OkStatus();
  constexpr int64_t kMaxSorted = std::numeric_limits<int32_t>::max() - 1;
  if (n > kMaxSorted || v > kMaxSorted) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", n, " ids into a table of ", v,
                                                   " rows exceed the CUDA kernel's 32-bit sort "
                                                   "keys; split the ids into smaller batches"));
  }
  const size_t bytes = EmbeddingBackwardScratchBytes(n, v);
  if (bytes == 0) {
    return absl::InternalError(absl::StrCat(
        kOp, ": CUB could not size the sort of ", n,
        " ids; check that the GPU and driver work (run the CUDA samples' deviceQuery)"));
  }
  ASSIGN_OR_RETURN(void* scratch, Scratch(kOp, ctx, bytes));
  return LaunchStatus(kOp, LaunchEmbeddingBackward(Elem(dtable.dtype), Id(ids.dtype), ids.data,
                                                   dout.data, dtable.data, n, v, c, vocab_start,
                                                   scratch, bytes, ctx.cuda_stream));
}

// ---- Cross-entropy ----

absl::Status CrossEntropy(const ExecContext& ctx, const TensorView& logits,
                          const TensorView& targets, const TensorView& losses) {
  constexpr absl::string_view kOp = "CrossEntropy";
  RETURN_IF_ERROR(
      Enter(kOp, ctx, logits.device, MT_OPERANDS(logits, targets, losses), Needs::kNothing));
  return LaunchStatus(kOp, LaunchCrossEntropy(Elem(logits.dtype), Id(targets.dtype), logits.data,
                                              targets.data, losses.data_as<float>(), logits.dim(0),
                                              logits.dim(1), ctx.cuda_stream));
}

absl::Status CrossEntropyBackward(const ExecContext& ctx, const TensorView& logits,
                                  const TensorView& targets, const TensorView& dlosses,
                                  const TensorView& dlogits) {
  constexpr absl::string_view kOp = "CrossEntropyBackward";
  RETURN_IF_ERROR(Enter(kOp, ctx, logits.device, MT_OPERANDS(logits, targets, dlosses, dlogits),
                        Needs::kNothing));
  return LaunchStatus(
      kOp, LaunchCrossEntropyBackward(Elem(logits.dtype), Id(targets.dtype), logits.data,
                                      targets.data, dlosses.data_as<float>(), dlogits.data,
                                      logits.dim(0), logits.dim(1), ctx.cuda_stream));
}

absl::Status ShardedRowMax(const ExecContext& ctx, const TensorView& logits, int64_t valid,
                           const TensorView& row_max) {
  constexpr absl::string_view kOp = "ShardedRowMax";
  RETURN_IF_ERROR(Enter(kOp, ctx, logits.device, MT_OPERANDS(logits, row_max), Needs::kNothing));
  return LaunchStatus(
      kOp, LaunchShardedRowMax(logits.data_as<float>(), row_max.data_as<float>(), logits.dim(0),
                               logits.dim(1), valid, ctx.cuda_stream));
}

absl::Status ShardedTargetAndSumExp(const ExecContext& ctx, const TensorView& logits,
                                    const TensorView& targets, int64_t valid, int64_t vocab_start,
                                    const TensorView& row_max, const TensorView& partials) {
  constexpr absl::string_view kOp = "ShardedTargetAndSumExp";
  RETURN_IF_ERROR(Enter(kOp, ctx, logits.device, MT_OPERANDS(logits, targets, row_max, partials),
                        Needs::kNothing));
  return LaunchStatus(kOp, LaunchShardedTargetAndSumExp(
                               Id(targets.dtype), logits.data_as<float>(), targets.data,
                               row_max.data_as<float>(), partials.data_as<float>(), logits.dim(0),
                               logits.dim(1), valid, vocab_start, ctx.cuda_stream));
}

absl::Status ShardedLoss(const ExecContext& ctx, const TensorView& targets,
                         const TensorView& row_max, const TensorView& partials,
                         const TensorView& losses) {
  constexpr absl::string_view kOp = "ShardedLoss";
  RETURN_IF_ERROR(Enter(kOp, ctx, losses.device, MT_OPERANDS(targets, row_max, partials, losses),
                        Needs::kNothing));
  return LaunchStatus(
      kOp, LaunchShardedLoss(Id(targets.dtype), targets.data, row_max.data_as<float>(),
                             partials.data_as<float>(), losses.data_as<float>(), losses.numel(),
                             ctx.cuda_stream));
}

absl::Status ShardedCrossEntropyBackward(const ExecContext& ctx, const TensorView& logits,
                                         const TensorView& targets, int64_t valid,
                                         int64_t vocab_start, const TensorView& row_max,
                                         const TensorView& partials, const TensorView& dlosses,
                                         const TensorView& dlogits) {
  constexpr absl::string_view kOp = "ShardedCrossEntropyBackward";
  RETURN_IF_ERROR(Enter(kOp, ctx, logits.device,
                        MT_OPERANDS(logits, targets, row_max, partials, dlosses, dlogits),
                        Needs::kNothing));
  return LaunchStatus(
      kOp, LaunchShardedCrossEntropyBackward(
               Id(targets.dtype), logits.data_as<float>(), targets.data, row_max.data_as<float>(),
               partials.data_as<float>(), dlosses.data_as<float>(), dlogits.data_as<float>(),
               logits.dim(0), logits.dim(1), valid, vocab_start, ctx.cuda_stream));
}

// ---- Heads ----

absl::Status HeadsPermute(absl::string_view op, const ExecContext& ctx, int64_t b, int64_t t,
                          int64_t g, int64_t per_group, int64_t d, const TensorView& token_major,
                          const TensorView* const head_major[], int64_t slots, bool to_heads) {
  const bool kv = slots > per_group;  // Key and value tensors too (SplitQkv, MergeQkv).
  RETURN_IF_ERROR(Enter(op, ctx, token_major.device,
                        {{"token-major tensor", &token_major},
                         {"head-major tensor", head_major[0]},
                         {"head-major tensor", kv ? head_major[1] : nullptr},
                         {"head-major tensor", kv ? head_major[2] : nullptr}},
                        Needs::kNothing));
  void* const hm[3] = {head_major[0]->data, kv ? head_major[1]->data : nullptr,
                       kv ? head_major[2]->data : nullptr};
  return LaunchStatus(
      op, LaunchHeadsPermute(static_cast<int>(DTypeSize(token_major.dtype)), b, t, g, per_group, d,
                             slots, token_major.data, hm, to_heads, ctx.cuda_stream));
}

// ---- Reductions ----

absl::StatusOr<double> Reduce(absl::string_view op, const ExecContext& ctx, const TensorView& x,
                              ReduceOp kind) {
  RETURN_IF_ERROR(Enter(op, ctx, x.device, MT_OPERANDS(x), Needs::kDeviceContext));
  const int64_t n = x.numel();
  const size_t bytes = static_cast<size_t>(ReduceScratchDoubles(n)) * sizeof(double);
  ASSIGN_OR_RETURN(void* scratch, Scratch(op, ctx, bytes));
  auto* out = static_cast<double*>(scratch);
  RETURN_IF_ERROR(
      LaunchStatus(op, LaunchReduce(Elem(x.dtype), kind, x.data, n, out, ctx.cuda_stream)));
  double result = 0.0;
  RETURN_IF_ERROR(ReadBack(op, ctx, out, sizeof(result), &result));
  return result;
}

// ---- Adam ----

absl::Status AdamUpdate(const ExecContext& ctx, const TensorView& param, const TensorView& grad,
                        const TensorView& m, const TensorView& v, const AdamConstants& params) {
  constexpr absl::string_view kOp = "AdamUpdate";
  RETURN_IF_ERROR(Enter(kOp, ctx, param.device, MT_OPERANDS(param, grad, m, v), Needs::kNothing));
  return LaunchStatus(kOp,
                      LaunchAdam(param.data_as<float>(), grad.data_as<float>(), m.data_as<float>(),
                                 v.data_as<float>(), param.numel(), params, ctx.cuda_stream));
}

}  // namespace cuda
}  // namespace mt
