#include "nn/attention.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/heads.h"
#include "core/ops/rope.h"
#include "core/status.h"
#include "nn/context_parallel.h"

namespace mt {
namespace nn {

namespace {
constexpr int kProbsDropoutSite = 1;

TensorView As(const Tensor& t, Shape shape) {
  return TensorView(t.data(), std::move(shape), t.dtype(), t.device());
}

// The fused attention's backward with RingAttentionBackward's signature.
absl::Status CoreBackward(const StepContext& sc, const TensorView& q, const TensorView& k,
                          const TensorView& v, const TensorView& out, const TensorView& dout,
                          const TensorView& lse, const ops::AttentionArgs& args,
                          const TensorView& dq, const TensorView& dk, const TensorView& dv) {
  return ops::FusedAttentionBackward(*sc.exec, q, k, v, out, dout, lse, args, dq, dk, dv);
}
}  // namespace

absl::StatusOr<ParallelSelfAttention> ParallelSelfAttention::Create(ParameterStore* store,
                                                                    const std::string& prefix,
                                                                    const AttentionConfig& config) {
  const int tp = store->tp_size();
  if (config.hidden <= 0 || config.heads <= 0 || config.hidden % config.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("attention: hidden size ", config.hidden,
                                                   " is not divisible by the number of heads ",
                                                   config.heads));
  }
  if (config.heads % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("attention: ", config.heads,
                                                   " heads are not divisible by the "
                                                   "tensor-parallel size ",
                                                   tp));
  }
  const int64_t groups = config.num_query_groups == 0 ? config.heads : config.num_query_groups;
  if (groups < 1 || config.heads % groups != 0 || groups % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention: ", groups, " query groups must divide the ", config.heads,
                     " heads and be divisible by the tensor-parallel size ", tp));
  }
  const int64_t head_dim = config.hidden / config.heads;
  if (!(std::isfinite(config.rotary_base) && config.rotary_base >= 0.0) ||
      (config.rotary_base > 0.0 && head_dim % 2 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention: rotary_base ", config.rotary_base, " with head dim ", head_dim,
        "; rotary embeddings need a finite base > 0 and an even head dim (0 turns them off)"));
  }
  ParallelSelfAttention a;
  a.config_ = config;
  a.dtype_ = store->compute_dtype();
  a.local_heads_ = config.heads / tp;
  a.local_groups_ = groups / tp;
  a.head_dim_ = head_dim;
  ASSIGN_OR_RETURN(a.qkv_, ColumnParallelLinear::Create(store, prefix + ".qkv", config.hidden,
                                                        (config.heads + 2 * groups) * head_dim,
                                                        config.bias, config.init_std));
  ASSIGN_OR_RETURN(a.proj_,
                   RowParallelLinear::Create(store, prefix + ".proj", config.hidden, config.hidden,
                                             config.bias, config.output_init_std));
  return a;
}

absl::Status ParallelSelfAttention::EnsureBuffers(const ExecContext& ec, int64_t B, int64_t T) {
  if (B == B_ && T == T_ && qkv_out_.numel() > 0 && q_.numel() > 0 &&
      qkv_out_.device() == ec.device) {
    return absl::OkStatus();
  }
  const int64_t NH = local_heads_, G = local_groups_, D = head_dim_;
  B_ = T_ = 0;  // Until every buffer is allocated.
  ASSIGN_OR_RETURN(qkv_out_, Alloc(ec, {B, T, QkvWidth()}, dtype_));
  ASSIGN_OR_RETURN(q_, Alloc(ec, {B, NH, T, D}, dtype_));
  ASSIGN_OR_RETURN(k_, Alloc(ec, {B, G, T, D}, dtype_));
  ASSIGN_OR_RETURN(v_, Alloc(ec, {B, G, T, D}, dtype_));
  ASSIGN_OR_RETURN(lse_, Alloc(ec, {B, NH, T}, DType::kF32));
  ASSIGN_OR_RETURN(ctx_heads_, Alloc(ec, {B, NH, T, D}, dtype_));
  ASSIGN_OR_RETURN(ctx_, Alloc(ec, {B, T, NH * D}, dtype_));
  B_ = B;
  T_ = T;
  return absl::OkStatus();
}

void ParallelSelfAttention::ReleaseCore() {
  for (Tensor* t : {&q_, &k_, &v_, &lse_, &ctx_heads_}) *t = Tensor();
}

absl::Status ParallelSelfAttention::RunCore(const StepContext& sc) {
  const ExecContext& ec = *sc.exec;
  const ops::HeadsShape hs{B_, T_, local_heads_, head_dim_, local_groups_};
  const Shape heads = {B_, local_heads_, T_, head_dim_};
  const Shape groups = {B_, local_groups_, T_, head_dim_};
  for (Tensor* t : {&q_, &k_, &v_, &ctx_heads_}) {
    if (t->numel() == 0) {
      ASSIGN_OR_RETURN(*t, Alloc(ec, t == &k_ || t == &v_ ? groups : heads, dtype_));
    }
  }
  if (lse_.numel() == 0) {
    ASSIGN_OR_RETURN(lse_, Alloc(ec, {B_, local_heads_, T_}, DType::kF32));
  }
  RETURN_IF_ERROR(ops::SplitQkv(ec, hs, qkv_out_.view(), q_.view(), k_.view(), v_.view()));
  RETURN_IF_ERROR(RotateChunks(sc, q_.view(), k_.view(), Rotation::kForward));
  if (sc.cp_size() > 1) {  // Context parallelism: this rank's two chunks, keys around the ring.
    return RingAttentionForward(sc, q_.view(), k_.view(), v_.view(), Args(sc), ctx_heads_.view(),
                                lse_.view());
  }
  // ctx = dropout(softmax(q k^T / sqrt(D))) v, fused: no [T, T] buffer is kept.
  return ops::FusedAttention(ec, q_.view(), k_.view(), v_.view(), Args(sc), ctx_heads_.view(),
                             lse_.view());
}

absl::Status ParallelSelfAttention::RotateChunks(const StepContext& sc, const TensorView& q,
                                                 const TensorView& k, Rotation rotation) const {
  if (sc.cp_size() == 1) return Rotate(*sc.exec, q, k, rotation);
  // Context parallelism: half h holds positions [CpChunk(h) T, (CpChunk(h) + 1) T).
  for (int h = 0; h < 2; ++h) {
    RETURN_IF_ERROR(Rotate(*sc.exec, CpHalf(q, h), CpHalf(k, h), rotation, CpChunk(sc, h) * T_));
  }
  return absl::OkStatus();
}

void ParallelSelfAttention::Release() {
  qkv_out_ = Tensor();
  q_ = Tensor();
  k_ = Tensor();
  v_ = Tensor();
  lse_ = Tensor();
  ctx_heads_ = Tensor();
  ctx_ = Tensor();
  B_ = T_ = 0;
}

int64_t ParallelSelfAttention::ActivationBytes() const {
  int64_t n = 0;
  for (const Tensor* t : {&qkv_out_, &q_, &k_, &v_, &lse_, &ctx_heads_, &ctx_}) {
    n += t->nbytes();
  }
  return n;
}

ops::DropoutArgs ParallelSelfAttention::ProbsDropout(const StepContext& sc) const {
  // Local probs [B, NH_local, T, T] are heads [tp_rank * NH_local, ...) of the global
  // [B_global, NH, T, T] tensor; key each element by its global index. With context parallelism
  // T is the whole sequence's (2 C chunks of T_), which ring attention keys its blocks from.
  const int64_t T = sc.cp_size() > 1 ? 2 * sc.cp_size() * T_ : T_;
  const int64_t block = local_heads_ * T * T;
  ops::DropoutArgs d;
  d.p = config_.dropout;
  d.seed = sc.dropout_seed;
  d.stream = sc.DropoutStream(config_.layer_index, kProbsDropoutSite);
  d.key_inner = block;
  d.key_outer_stride = config_.heads * T * T;
  d.key_base = sc.sample_offset * d.key_outer_stride + sc.tp_rank() * block;
  return d;
}

ops::AttentionArgs ParallelSelfAttention::Args(const StepContext& sc) const {
  ops::AttentionArgs a;
  a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  a.causal = config_.causal;
  a.padding_mask = has_padding_mask_ ? &padding_mask_ : nullptr;
  if (config_.dropout > 0 && sc.training()) a.dropout = ProbsDropout(sc);
  return a;
}

absl::Status ParallelSelfAttention::Rotate(const ExecContext& ec, const TensorView& q,
                                           const TensorView& k, Rotation rotation,
                                           int64_t position_offset) const {
  if (config_.rotary_base == 0.0) return absl::OkStatus();
  const ops::RopeArgs args{config_.rotary_base, position_offset};
  const auto rotate = rotation == Rotation::kForward ? ops::Rope : ops::RopeBackward;
  RETURN_IF_ERROR(rotate(ec, q, args, q));
  return rotate(ec, k, args, k);
}

absl::Status ParallelSelfAttention::Forward(const StepContext& sc, const TensorView& x,
                                            const TensorView* padding_mask, const TensorView& y,
                                            const TensorView** deferred_bias) {
  if (x.rank() != 3 || x.dim(2) != config_.hidden || x.dtype != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat("attention: input ", x.DebugString(),
                                                   " must be ", DTypeName(dtype_), "[B, T, ",
                                                   config_.hidden, "] (the compute dtype)"));
  }
  const int64_t B = x.dim(0), T = x.dim(1), NH = local_heads_, D = head_dim_;
  RETURN_IF_ERROR(EnsureBuffers(*sc.exec, B, T));
  x_ = x;
  has_padding_mask_ = padding_mask != nullptr;
  if (has_padding_mask_) padding_mask_ = *padding_mask;
  const ops::HeadsShape hs{B, T, NH, D};
  const ExecContext& ec = *sc.exec;

  ASSIGN_OR_RETURN(TensorView x2, x.Reshape({B * T, config_.hidden}));
  RETURN_IF_ERROR(qkv_.Forward(sc, x2, As(qkv_out_, {B * T, QkvWidth()})));
  RETURN_IF_ERROR(RunCore(sc));
  RETURN_IF_ERROR(ops::MergeHeads(ec, hs, ctx_heads_.view(), ctx_.view()));
  if (config_.recompute_core) ReleaseCore();
  ASSIGN_OR_RETURN(TensorView y2, y.Reshape({B * T, config_.hidden}));
  return proj_.Forward(sc, As(ctx_, {B * T, NH * D}), y2, deferred_bias, config_.tp_reduce);
}

absl::Status ParallelSelfAttention::Backward(const StepContext& sc, const TensorView& dy,
                                             const TensorView& dx) {
  const int64_t B = B_, T = T_, NH = local_heads_, D = head_dim_;
  if (qkv_out_.numel() == 0) {
    return absl::FailedPreconditionError("attention: Backward without a saved Forward");
  }
  const ops::HeadsShape hs{B, T, NH, D};
  const ExecContext& ec = *sc.exec;
  // Selective recomputation: the core again, with the same dropout masks.
  if (q_.numel() == 0) RETURN_IF_ERROR(RunCore(sc));
  // Scratch for gradients: reuse shapes of the saved activations.
  ASSIGN_OR_RETURN(Tensor dctx, Alloc(ec, {B, T, NH * D}, dtype_));
  ASSIGN_OR_RETURN(TensorView dy2, dy.Reshape({B * T, config_.hidden}));
  RETURN_IF_ERROR(proj_.Backward(sc, As(ctx_, {B * T, NH * D}), dy2, As(dctx, {B * T, NH * D})));
  ASSIGN_OR_RETURN(Tensor dctx_heads, Alloc(ec, {B, NH, T, D}, dtype_));
  RETURN_IF_ERROR(ops::SplitHeads(ec, hs, dctx.view(), dctx_heads.view()));

  ASSIGN_OR_RETURN(Tensor dq, Alloc(ec, {B, NH, T, D}, dtype_));
  ASSIGN_OR_RETURN(Tensor dk, Alloc(ec, {B, local_groups_, T, D}, dtype_));
  ASSIGN_OR_RETURN(Tensor dv, Alloc(ec, {B, local_groups_, T, D}, dtype_));
  const auto backward = sc.cp_size() > 1 ? RingAttentionBackward : CoreBackward;
  RETURN_IF_ERROR(backward(sc, q_.view(), k_.view(), v_.view(), ctx_heads_.view(),
                           dctx_heads.view(), lse_.view(), Args(sc), dq.view(), dk.view(),
                           dv.view()));
  RETURN_IF_ERROR(RotateChunks(sc, dq.view(), dk.view(), Rotation::kBackward));
  ASSIGN_OR_RETURN(Tensor dqkv, Alloc(ec, {B, T, QkvWidth()}, dtype_));
  const ops::HeadsShape qkv_shape{B, T, NH, D, local_groups_};
  RETURN_IF_ERROR(ops::MergeQkv(ec, qkv_shape, dq.view(), dk.view(), dv.view(), dqkv.view()));
  ASSIGN_OR_RETURN(TensorView x2, x_.Reshape({B * T, config_.hidden}));
  ASSIGN_OR_RETURN(TensorView dx2, dx.Reshape({B * T, config_.hidden}));
  if (config_.recompute_core) ReleaseCore();
  if (config_.tp_reduce == TpReduce::kPartial) {
    return qkv_.BackwardLocal(sc, x2, As(dqkv, {B * T, QkvWidth()}), dx2, InputGrad::kOverwrite);
  }
  return qkv_.Backward(sc, x2, As(dqkv, {B * T, QkvWidth()}), dx2);
}

// ---------------------------------------------------------------- incremental decoding

namespace {
// `count` elements of `t` from element `offset`, as `shape`.
TensorView Slice(const Tensor& t, int64_t offset, Shape shape) {
  char* base = static_cast<char*>(t.data()) + offset * DTypeSize(t.dtype());
  return TensorView(base, std::move(shape), t.dtype(), t.device());
}
}  // namespace

absl::Status ParallelSelfAttention::StartDecoding(const ExecContext& ec, int64_t batch,
                                                  int64_t max_length) {
  StopDecoding();
  if (config_.causal != ops::CausalMask::kYes) {
    return absl::FailedPreconditionError(
        "attention: incremental decoding needs causal attention (this layer is bidirectional)");
  }
  if (batch < 1 || max_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat("attention: cannot decode ", batch,
                                                   " sequences of up to ", max_length,
                                                   " positions (both must be >= 1)"));
  }
  const Shape by_position = {batch, max_length, local_groups_, head_dim_};
  const Shape by_head = {batch, local_groups_, max_length, head_dim_};
  KvCache c;
  ASSIGN_OR_RETURN(c.keys, Alloc(ec, by_position, dtype_));
  ASSIGN_OR_RETURN(c.values, Alloc(ec, by_position, dtype_));
  ASSIGN_OR_RETURN(c.gathered_keys, Alloc(ec, by_head, dtype_));
  ASSIGN_OR_RETURN(c.gathered_values, Alloc(ec, by_head, dtype_));
  c.batch = batch;
  c.max_length = max_length;
  c.lengths.assign(batch, 0);
  cache_ = std::move(c);
  return absl::OkStatus();
}

void ParallelSelfAttention::StopDecoding() { cache_ = KvCache(); }

absl::Status ParallelSelfAttention::ResetSlot(int64_t slot) {
  if (slot < 0 || slot >= cache_.batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention: slot ", slot, " outside [0, ", cache_.batch, ")"));
  }
  cache_.lengths[slot] = 0;
  return absl::OkStatus();
}

int64_t ParallelSelfAttention::CacheBytes() const {
  return cache_.keys.nbytes() + cache_.values.nbytes() + cache_.gathered_keys.nbytes() +
         cache_.gathered_values.nbytes();
}

absl::Status ParallelSelfAttention::EnsureStepBuffers(const ExecContext& ec, int64_t rows) {
  KvCache& c = cache_;
  if (c.rows == rows) return absl::OkStatus();
  const int64_t N = rows, NH = local_heads_, G = local_groups_, D = head_dim_;
  c.rows = 0;  // Until every buffer is allocated.
  ASSIGN_OR_RETURN(c.qkv, Alloc(ec, {N, QkvWidth()}, dtype_));
  for (Tensor* t : {&c.q, &c.ctx_heads}) {
    ASSIGN_OR_RETURN(*t, Alloc(ec, {N * NH * D}, dtype_));
  }
  for (Tensor* t : {&c.k, &c.v}) {
    ASSIGN_OR_RETURN(*t, Alloc(ec, {N * G * D}, dtype_));
  }
  ASSIGN_OR_RETURN(c.lse, Alloc(ec, {N * NH}, DType::kF32));
  ASSIGN_OR_RETURN(c.ctx, Alloc(ec, {N, NH * D}, dtype_));
  c.rows = rows;
  return absl::OkStatus();
}

absl::Status ParallelSelfAttention::CheckSpans(absl::Span<const DecodeSpan> spans,
                                               int64_t* rows) const {
  const KvCache& c = cache_;
  if (c.batch == 0) {
    return absl::FailedPreconditionError("attention: decoding before StartDecoding");
  }
  if (spans.empty()) return absl::InvalidArgumentError("attention: a decoding step of no spans");
  std::vector<bool> seen(c.batch, false);
  *rows = 0;
  for (const DecodeSpan& s : spans) {
    if (s.slot < 0 || s.slot >= c.batch || seen[s.slot] || s.count < 1) {
      return absl::InvalidArgumentError(absl::StrCat("attention: span (slot ", s.slot, ", count ",
                                                     s.count, ") needs a slot in [0, ", c.batch,
                                                     ") not given twice, and count >= 1"));
    }
    seen[s.slot] = true;
    if (c.lengths[s.slot] + s.count > c.max_length) {
      return absl::InvalidArgumentError(
          absl::StrCat("attention: ", s.count, " more positions after ", c.lengths[s.slot],
                       " in slot ", s.slot, " exceed the cache's ", c.max_length));
    }
    *rows += s.count;
  }
  return absl::OkStatus();
}

absl::Status ParallelSelfAttention::AttendSpan(const ExecContext& ec, const DecodeSpan& span,
                                               int64_t row) {
  KvCache& c = cache_;
  const int64_t n = span.count, NH = local_heads_, G = local_groups_, D = head_dim_;
  const int64_t length = c.lengths[span.slot], total = length + n;
  const TensorView qkv = Slice(c.qkv, row * QkvWidth(), {1, n, QkvWidth()});
  const TensorView q = Slice(c.q, row * NH * D, {1, NH, n, D});
  const TensorView k = Slice(c.k, row * G * D, {1, G, n, D});
  const TensorView v = Slice(c.v, row * G * D, {1, G, n, D});
  RETURN_IF_ERROR(ops::SplitQkv(ec, ops::HeadsShape{1, n, NH, D, G}, qkv, q, k, v));
  RETURN_IF_ERROR(Rotate(ec, q, k, Rotation::kForward, length));
  // [G, n, D] -> the slot's rows [length, total) of its [max_length, G, D] cache (MergeHeads
  // swaps the two leading dims), then, when earlier positions are cached, the slot's rows
  // [0, total) back to head-major [G, total, D] (SplitHeads, the inverse swap).
  const int64_t slot_base = span.slot * c.max_length * G * D;
  const ops::HeadsShape append{1, n, G, D};
  RETURN_IF_ERROR(
      ops::MergeHeads(ec, append, k, Slice(c.keys, slot_base + length * G * D, {n * G * D})));
  RETURN_IF_ERROR(
      ops::MergeHeads(ec, append, v, Slice(c.values, slot_base + length * G * D, {n * G * D})));
  TensorView keys = k, values = v;
  if (length > 0) {
    const ops::HeadsShape gather{1, total, G, D};
    keys = Slice(c.gathered_keys, slot_base, {1, G, total, D});
    values = Slice(c.gathered_values, slot_base, {1, G, total, D});
    RETURN_IF_ERROR(ops::SplitHeads(ec, gather, Slice(c.keys, slot_base, {total * G * D}), keys));
    RETURN_IF_ERROR(
        ops::SplitHeads(ec, gather, Slice(c.values, slot_base, {total * G * D}), values));
  }
  ops::AttentionArgs args;  // Causal, no dropout: query i sees keys j <= i + length.
  args.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  args.causal = ops::CausalMask::kYes;
  const TensorView ctx_heads = Slice(c.ctx_heads, row * NH * D, {1, NH, n, D});
  RETURN_IF_ERROR(ops::FusedAttention(ec, q, keys, values, args, ctx_heads,
                                      Slice(c.lse, row * NH, {1, NH, n})));
  RETURN_IF_ERROR(ops::MergeHeads(ec, ops::HeadsShape{1, n, NH, D}, ctx_heads,
                                  Slice(c.ctx, row * NH * D, {1, n, NH * D})));
  c.lengths[span.slot] = total;
  return absl::OkStatus();
}

absl::Status ParallelSelfAttention::DecodeSlots(const StepContext& sc, const TensorView& x,
                                                absl::Span<const DecodeSpan> spans,
                                                const TensorView& y,
                                                const TensorView** deferred_bias) {
  int64_t N = 0;
  RETURN_IF_ERROR(CheckSpans(spans, &N));
  const int64_t H = config_.hidden;
  for (const TensorView* t : {&x, &y}) {
    if (t->numel() != N * H || !t->IsContiguous() || t->dtype != dtype_) {
      return absl::InvalidArgumentError(
          absl::StrCat("attention: decoding tensor ", t->DebugString(), " must be ",
                       DTypeName(dtype_), " [", N, ", ", H, "] (the spans' rows)"));
    }
  }
  const ExecContext& ec = *sc.exec;
  RETURN_IF_ERROR(EnsureStepBuffers(ec, N));
  ASSIGN_OR_RETURN(TensorView x2, x.Reshape({N, H}));
  RETURN_IF_ERROR(qkv_.Forward(sc, x2, cache_.qkv.view()));
  int64_t row = 0;
  for (const DecodeSpan& span : spans) {
    RETURN_IF_ERROR(AttendSpan(ec, span, row));
    row += span.count;
  }
  ASSIGN_OR_RETURN(TensorView y2, y.Reshape({N, H}));
  return proj_.Forward(sc, cache_.ctx.view(), y2, deferred_bias);
}

absl::Status ParallelSelfAttention::DecodeForward(const StepContext& sc, const TensorView& x,
                                                  const TensorView& y,
                                                  const TensorView** deferred_bias) {
  const KvCache& c = cache_;
  if (c.batch == 0) {
    return absl::FailedPreconditionError("attention: DecodeForward before StartDecoding");
  }
  if (x.rank() != 3 || x.dim(0) != c.batch || x.dim(1) < 1 || x.dim(2) != config_.hidden ||
      x.dtype != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention: decoding input ", x.DebugString(), " must be ", DTypeName(dtype_), "[", c.batch,
        ", n >= 1, ", config_.hidden, "] (the started batch, the compute dtype)"));
  }
  std::vector<DecodeSpan> spans;
  for (int64_t b = 0; b < c.batch; ++b) {
    if (c.lengths[b] != c.lengths[0]) {
      return absl::FailedPreconditionError(
          "attention: DecodeForward needs every slot at the same length (use DecodeSlots)");
    }
    spans.push_back(DecodeSpan{b, x.dim(1)});
  }
  return DecodeSlots(sc, x, spans, y, deferred_bias);
}

}  // namespace nn
}  // namespace mt
