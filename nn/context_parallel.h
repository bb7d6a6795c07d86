// Context parallelism (Megatron-Core's --context-parallel-size) in nn/: the chunk layout every
// module sees, the dropout keys of a rank's chunks, and ring attention.
//
// With CP = C > 1 (StepContext::cp), each sample's sequence of T positions is cut into 2C chunks
// of c = T / (2C) positions; CP rank r holds chunks r and 2C-1-r (with causal attention every rank
// then does the same work: an early chunk sees few keys, its mirror many). Modules see this rank's
// positions CHUNK-MAJOR: an activation [2B, c, H] whose rows [0, B) are chunk r of the B samples
// ("half 0") and rows [B, 2B) chunk 2C-1-r ("half 1"); models/context_parallel.h cuts batches so.
// Everything but attention works token by token and needs nothing else; dropouts key each element
// by its position in the whole [B, T, H] (CpChunkDropout), so the masks are the serial run's.
//
// Ring attention (RingAttentionForward/Backward): rank r keeps its queries; the key/value blocks
// of the C ranks travel around the ring r -> r+1 (C - 1 exchanges, by non-blocking Send/Recv
// started before the block in hand is computed, so the exchange overlaps it). Each block of
// (query chunk a, key chunk b) is one ops::FusedAttention call: skipped when b > a (causal), with
// the causal mask when b == a, unmasked when b < a, and merged into the running output by its
// log-sum-exp (ops::AttentionMerge). The backward runs the same ring with the final output and
// log-sum-exp (so each block's probabilities are the global ones), adds the dq of every block, and
// sends the key/value gradients around the ring with their blocks (C exchanges: they end at home).
// Bidirectional attention (BERT) visits every block; a padding mask then covers the whole
// sequence, chunk-major: i32 [2C * B, c], rows [k B, (k + 1) B) the mask of chunk k.
// Dropout on the probabilities keys each element by its place in the whole sequence's
// probabilities, so the masks are the serial run's: a block with dropout is computed one (sample,
// head) at a time, since its rows are not contiguous in those keys. Devices other than the CPU are
// not implemented (ops::AttentionMerge).
#ifndef MT_NN_CONTEXT_PARALLEL_H_
#define MT_NN_CONTEXT_PARALLEL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "nn/context.h"

namespace mt {
namespace nn {

// The chunk (in [0, 2C)) of half `half` (0 or 1) of this rank's positions: r or 2C-1-r.
int64_t CpChunk(const StepContext& sc, int half);

// Rows [half * n / 2, (half + 1) * n / 2) of dimension 0 of a contiguous view with n rows.
TensorView CpHalf(const TensorView& t, int half);

// The dropout of half `half` ([B, c, width], or [B, c / tp, width] at `tp_slice` >= 0 with
// sequence parallelism: TP rank tp_slice's slice of the chunk) of an activation whose whole is
// [B, T = 2 C c, width]: `whole` keys the whole (StepContext::Dropout with sample_elems T * width),
// and each element keeps its whole-tensor key.
ops::DropoutArgs CpChunkDropout(const StepContext& sc, const ops::DropoutArgs& whole,
                                int64_t chunk_len, int64_t width, int half, int tp_slice = -1);

// Ring attention over sc.cp (size C >= 1; C = 1 is plain fused attention over both halves).
// q, out: [2B, NH, c, D]; k, v: [2B, G, c, D]; lse: f32 [2B, NH, c], chunk-major; args.causal as
// for FusedAttention within a chunk, args.padding_mask null or i32 [2C * B, c] (the whole
// sequence's, chunk-major), args.dropout keys the whole sequence's probabilities [B, NH, T, T]
// (T = 2 C c) as ops::FusedAttention over the whole sequence would (key_inner 0 or a multiple of
// T^2, as ParallelSelfAttention's are). Overwrites out and lse. Collective over sc.cp (every rank
// calls it with the same shapes). Errors: those of the ops, communicator errors.
absl::Status RingAttentionForward(const StepContext& sc, const TensorView& q, const TensorView& k,
                                  const TensorView& v, const ops::AttentionArgs& args,
                                  const TensorView& out, const TensorView& lse);
// The gradients of RingAttentionForward: overwrites dq [2B, NH, c, D], dk, dv [2B, G, c, D] given
// the forward's inputs, out and lse, and dout. Collective over sc.cp.
absl::Status RingAttentionBackward(const StepContext& sc, const TensorView& q, const TensorView& k,
                                   const TensorView& v, const TensorView& out,
                                   const TensorView& dout, const TensorView& lse,
                                   const ops::AttentionArgs& args, const TensorView& dq,
                                   const TensorView& dk, const TensorView& dv);

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_CONTEXT_PARALLEL_H_
