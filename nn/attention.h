// ParallelSelfAttention: multi-head self-attention with the heads split across TP ranks, and
// optionally grouped-query attention (Ainslie et al. 2023): G key/value heads ("query groups"),
// each shared by NH / G query heads (G = NH: multi-head attention; G = 1: multi-query). Each TP
// rank holds NH / tp query heads and the G / tp groups they read.
//
//   qkv = ColumnParallel(x)            [B, T, (NH_local + 2 G_local) * D]  (columns ordered
//                                      (group, {its NH / G queries, key, value}, d); with G = NH
//                                      that is (head, q|k|v, d))
//   q, k, v = SplitQkv(qkv)            q [B, NH_local, T, D], k, v [B, G_local, T, D]
//   q, k = Rope(q), Rope(k)            only with rotary_base > 0: rotary position embeddings
//                                      (core/ops/rope.h, rotate-half pairs, positions 0 .. T-1);
//                                      backward rotates dq and dk back (RopeBackward)
//   probs = softmax(q k^T / sqrt(D))   [B, NH_local, T, T]  causal (GPT) or padding-masked (BERT);
//                                      query head h against the keys of group h / (NH / G)
//   probs = dropout(probs)             mask keyed by the GLOBAL head index
//   ctx = MergeHeads(probs v)          [B, T, NH_local * D]
//     (the three lines above are one fused op, ops::FusedAttention: the probabilities are never
//     stored, only each query row's log-sum-exp; backward recomputes them tile by tile)
//   y = RowParallel(ctx)               [B, T, H]  (one all-reduce; bias added once)
//
// Context parallelism (sc.cp_size() > 1, nn/context_parallel.h): x holds this rank's two chunks
// chunk-major ([2B, c, H]); rotary positions are the chunks' own and the attention core runs as a
// ring over sc.cp (RingAttentionForward/Backward), with a padding mask of the whole sequence
// ([2C * B, c] chunk-major). Dropout on the probabilities is Unimplemented there.
//
// Incremental decoding (text generation): after StartDecoding, DecodeForward runs the next n
// positions of every sequence against a key/value cache of the positions before them (see below).
//
// One all-reduce forward (in the output projection) and one backward (in the QKV projection's f).
// Activations are in the store's compute dtype (scores and probabilities stay in f32 inside the
// fused op). The module owns the activations it saves for backward (reallocated only when
// B or T change); Release() frees them (activation checkpointing).
#ifndef MT_NN_ATTENTION_H_
#define MT_NN_ATTENTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/softmax.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/linear.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

struct AttentionConfig {
  int64_t hidden = 0;
  int64_t heads = 0;
  // Key/value heads (grouped-query attention): divides heads, and is divisible by the TP size.
  // 0: heads (multi-head attention, bitwise what it was before groups existed).
  int64_t num_query_groups = 0;
  ops::CausalMask causal = ops::CausalMask::kYes;
  float dropout = 0.0f;
  double init_std = 0.02;
  double output_init_std = 0.02;  // The paper scales output projections by 1/sqrt(2 * layers).
  int layer_index = 0;            // For dropout streams.
  // > 0: rotary position embeddings on q and k with theta_i = rotary_base^(-2i / D) (LLaMA:
  // 10000); requires an even head dim. 0: none (GPT-2, BERT: absolute position embeddings).
  double rotary_base = 0.0;
  // Biases of the QKV and output projections ("<prefix>.qkv.bias", "<prefix>.proj.bias").
  Bias bias = Bias::kYes;
  // kPartial (nn/linear.h TpReduce): Forward leaves the output projection's partial product
  // (no all-reduce, no bias: deferred_bias must be given) and Backward the QKV projection's
  // partial input gradient (no all-reduce), for the caller to reduce with another module's.
  TpReduce tp_reduce = TpReduce::kYes;
  // Selective activation recomputation (Korthikanti et al. 2022): after Forward only the QKV
  // projection's output and the context (the inputs of the two projections' backward) are kept;
  // q, k, v, the context heads and the log-sum-exps are freed and Backward recomputes them (split,
  // rotation, fused attention: the same values, bitwise, so the gradients are those of the stored
  // path).
  bool recompute_core = false;
};

class ParallelSelfAttention {
 public:
  ParallelSelfAttention() = default;
  // InvalidArgument if hidden % heads != 0 or heads % tp != 0, for query groups that do not divide
  // the heads or are not divisible by tp, for a rotary_base that is negative or not finite, or for
  // rotary embeddings with an odd head dim.
  static absl::StatusOr<ParallelSelfAttention> Create(ParameterStore* store,
                                                      const std::string& prefix,
                                                      const AttentionConfig& config);
  // x: [B, T, H] in the compute dtype (kept by the caller until Backward); padding_mask: null or
  // i32 [B, T] (0 = padding); y: [B, T, H]. InvalidArgument for another shape or dtype.
  // deferred_bias: as for RowParallelLinear::Forward (the output projection's bias).
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView* padding_mask,
                       const TensorView& y, const TensorView** deferred_bias = nullptr);
  // dy: [B, T, H]; dx: [B, T, H] (complete: all-reduced over TP).
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx);
  // Frees the saved activations.
  void Release();
  // Bytes of activations currently held.
  int64_t ActivationBytes() const;

  // ---- Incremental decoding with a key/value cache (causal attention only; no dropout).
  // The cache holds, for each of S slots (one sequence each, with its own length), this rank's
  // key/value heads (G_local = NH_local without grouped-query attention; the TP ranks each cache
  // their own) of every position seen, position-major within the slot so that appending
  // positions writes one contiguous block:
  //   keys, values [S, max_length, G_local, D] in the compute dtype (keys after the rotation,
  //   with rotary embeddings).
  // Grouped-query attention shrinks it by NH / G: the query heads of a group read its cached rows.
  // Each step gathers a slot's cached positions into head-major [G_local, c + n, D] scratch (the
  // cache's size again) for ops::FusedAttention, which takes contiguous operands: a copy linear in
  // the cache length per layer, step and sequence.
  //
  // Batch invariance: the projections run once over all the step's rows (row r of a GEMM's
  // output depends only on row r of its input, docs/generation.md), and everything between
  // them runs per span on that span's rows alone, so a sequence's outputs do not depend on which
  // other sequences share its step.
  //
  // Allocates the cache for `batch` slots of up to `max_length` positions on ec.device (every
  // slot empty), forgetting any earlier one. InvalidArgument for sizes < 1; FailedPrecondition for
  // bidirectional (non-causal) attention; ResourceExhausted when out of memory.
  absl::Status StartDecoding(const ExecContext& ec, int64_t batch, int64_t max_length);
  // x: [B, n, H] (compute dtype), positions c .. c + n - 1 of slot b's sequence for b < B (every
  // slot, all of the same length c = cache_length()); y: [B, n, H] (one all-reduce). Position c + i
  // attends to positions 0 .. c + i; with rotary embeddings q and k are rotated for positions
  // c + i. The n positions join the cache. deferred_bias: as for Forward. FailedPrecondition before
  // StartDecoding or when the slots' lengths differ; InvalidArgument for another B, shape or
  // dtype, or c + n > max_length.
  absl::Status DecodeForward(const StepContext& sc, const TensorView& x, const TensorView& y,
                             const TensorView** deferred_bias = nullptr);
  // The slotted step (continuous batching): x [N, H] (compute dtype), the rows of `spans` packed
  // (N = the sum of their counts; span s's rows are positions c_s .. c_s + count - 1 of its
  // slot, c_s = slot_length(slot)); y [N, H]. InvalidArgument for no spans, a slot out of range
  // or given twice, a count < 1, c_s + count > max_length, or x / y of another shape or dtype;
  // FailedPrecondition before StartDecoding.
  absl::Status DecodeSlots(const StepContext& sc, const TensorView& x,
                           absl::Span<const DecodeSpan> spans, const TensorView& y,
                           const TensorView** deferred_bias = nullptr);
  // Empties a slot (its next span starts at position 0). InvalidArgument for a slot out of range.
  absl::Status ResetSlot(int64_t slot);
  // Frees the cache and the decoding scratch.
  void StopDecoding();
  // Positions cached in slot 0 (every slot's, for DecodeForward; 0 when not decoding).
  int64_t cache_length() const { return cache_.lengths.empty() ? 0 : cache_.lengths[0]; }
  int64_t slot_length(int64_t slot) const { return cache_.lengths[slot]; }
  // Bytes of the cache and its gather scratch.
  int64_t CacheBytes() const;

 private:
  // The decoding state: the cache, its gather scratch, and the buffers of one step of N rows.
  struct KvCache {
    int64_t batch = 0, max_length = 0;
    std::vector<int64_t> lengths;           // [S]: positions cached per slot.
    Tensor keys, values;                    // [S, max_length, G_local, D]
    Tensor gathered_keys, gathered_values;  // [S, G_local, max_length, D] (prefixes used)
    int64_t rows = 0;                       // N: rows the step buffers hold.
    Tensor qkv;                             // [N, (NH_local + 2 G_local) * D]
    Tensor q, ctx_heads;                    // per span [NH_local, n, D], packed
    Tensor k, v;                            // per span [G_local, n, D], packed
    Tensor lse;                             // f32, per span [NH_local, n], packed
    Tensor ctx;                             // [N, H_local]
  };
  absl::Status EnsureStepBuffers(const ExecContext& ec, int64_t rows);
  absl::Status CheckSpans(absl::Span<const DecodeSpan> spans, int64_t* rows) const;
  // One span's attention: rows [row, row + n) of c.qkv into the same rows of c.ctx, its keys and
  // values appended to its slot.
  absl::Status AttendSpan(const ExecContext& ec, const DecodeSpan& span, int64_t row);

  absl::Status EnsureBuffers(const ExecContext& ec, int64_t B, int64_t T);
  // The attention core: q, k, v from qkv_out_ (rotated), ctx_heads_ and lse_ from them.
  absl::Status RunCore(const StepContext& sc);
  // Frees what RunCore writes (selective recomputation).
  void ReleaseCore();
  ops::DropoutArgs ProbsDropout(const StepContext& sc) const;
  // The fused op's arguments for this micro-batch (dropout only when training).
  ops::AttentionArgs Args(const StepContext& sc) const;
  // Rotary embeddings (kForward: ops::Rope) on q and k, or their transpose (kBackward:
  // ops::RopeBackward) on dq and dk, in place, for positions position_offset, ...; nothing when
  // rotary_base is 0.
  enum class Rotation { kForward, kBackward };
  absl::Status Rotate(const ExecContext& ec, const TensorView& q, const TensorView& k,
                      Rotation rotation, int64_t position_offset = 0) const;
  // Rotate for a training step's q and k: positions 0 .. T-1, or with context parallelism
  // (sc.cp_size() > 1) each chunk-major half at its chunk's positions (nn/context_parallel.h).
  absl::Status RotateChunks(const StepContext& sc, const TensorView& q, const TensorView& k,
                            Rotation rotation) const;

  AttentionConfig config_;
  DType dtype_ = DType::kF32;  // The store's compute dtype.
  int64_t local_heads_ = 0, local_groups_ = 0, head_dim_ = 0;
  // Columns of this rank's QKV projection: (NH_local + 2 G_local) * D.
  int64_t QkvWidth() const { return (local_heads_ + 2 * local_groups_) * head_dim_; }
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  int64_t B_ = 0, T_ = 0;
  TensorView x_;  // The forward input (owned by the caller).
  TensorView padding_mask_;
  bool has_padding_mask_ = false;
  Tensor qkv_out_;    // [B, T, (NH_local + 2 G_local) * D]
  Tensor q_;          // [B, NH_local, T, D]
  Tensor k_, v_;      // [B, G_local, T, D]
  Tensor lse_;        // f32 [B, NH_local, T]: log-sum-exp of each query row (fused attention)
  Tensor ctx_heads_;  // [B, NH_local, T, D]
  Tensor ctx_;        // [B, T, H_local]
  KvCache cache_;
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_ATTENTION_H_
