// CUDA implementations behind the op interface (core/ops). Called by the ops' device dispatch
// after their argument checks (shapes, dtypes, one device, contiguity): the semantics, aliasing
// rules and precisions are those documented in the op headers. No CUDA headers here. Declared in
// every build; in builds without the CUDA backend (no CUDA toolkit, or --config=cpu_only) they are
// defined by ops_cuda_stub.cc, where each returns Unimplemented "<op>: not implemented for cuda:N:
// this binary was built without the CUDA backend ...".
//
// With the backend, every function launches on ctx.cuda_stream, makes the tensors' device
// current, and returns:
//   Unimplemented      "<op>: not implemented for cuda:N here: no CUDA device ..." when this
//                      machine has no usable CUDA device;
//   InvalidArgument    a non-empty tensor whose memory is not on its device (host memory, another
//                      GPU), a device index the machine does not have, or ctx.cuda for another
//                      device;
//   FailedPrecondition the function needs ctx.cuda (marked "needs ctx.cuda") and it is null;
//   ResourceExhausted / Internal for CUDA and cuBLAS failures, with the file and line.
// Functions that read results back (reductions, id checks) synchronize the stream; the others
// only queue work.
#ifndef MT_CORE_CUDA_OPS_CUDA_H_
#define MT_CORE_CUDA_OPS_CUDA_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cuda/launchers.h"
#include "core/exec_context.h"
#include "core/gemm_shape.h"
#include "core/tensor.h"

namespace mt {
namespace cuda {

// ---- Element-wise (core/ops/elementwise.h, core/ops/tanh.h) ----
absl::Status BiasAdd(const ExecContext& ctx, const TensorView& x, const TensorView& bias,
                     const TensorView& y);
// dbias in dy's dtype or f32. Needs ctx.cuda (scratch for the row-block partial sums).
absl::Status BiasGrad(const ExecContext& ctx, const TensorView& dy, const TensorView& dbias);
absl::Status Gelu(const ExecContext& ctx, const TensorView& x, const TensorView& y);
absl::Status GeluBackward(const ExecContext& ctx, const TensorView& x, const TensorView& dy,
                          const TensorView& dx);
// ops::Gelu and ops::GeluBackward with GeluForm::kErf.
absl::Status GeluErf(const ExecContext& ctx, const TensorView& x, const TensorView& y);
absl::Status GeluErfBackward(const ExecContext& ctx, const TensorView& x, const TensorView& dy,
                             const TensorView& dx);
absl::Status Add(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out);
absl::Status Scale(const ExecContext& ctx, const TensorView& x, float alpha, const TensorView& y);
absl::Status Tanh(const ExecContext& ctx, const TensorView& x, const TensorView& y);
absl::Status TanhBackward(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                          const TensorView& dx);
// y = x converted to y's dtype; equal dtypes copy (nothing when x and y are the same memory).
// Different dtypes must not overlap (checked by the caller).
absl::Status Convert(const ExecContext& ctx, const TensorView& x, const TensorView& y);
// Every element of x set to the elem_bytes-byte (2, 4 or 8) bit pattern at `pattern`.
absl::Status Fill(const ExecContext& ctx, const TensorView& x, const void* pattern,
                  size_t elem_bytes);
// Dropout or DropoutBackward (`op` names which); p = 0 copies.
absl::Status Dropout(absl::string_view op, const ExecContext& ctx, const TensorView& x,
                     const DropoutParams& params, const TensorView& y);
// ops::BiasDropoutAdd; bias may be null.
absl::Status BiasDropoutAdd(const ExecContext& ctx, const TensorView& x, const TensorView* bias,
                            const DropoutParams& params, const TensorView& residual,
                            const TensorView& out);

// ---- LayerNorm (core/ops/layernorm.h) ----
absl::Status LayerNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                       const TensorView& beta, float eps, const TensorView& y,
                       const TensorView& mean, const TensorView& rstd);
// Needs ctx.cuda (scratch for the dgamma/dbeta partial sums).
absl::Status LayerNormBackward(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                               const TensorView& mean, const TensorView& rstd, const TensorView& dy,
                               const TensorView& dx, const TensorView& dgamma,
                               const TensorView& dbeta);

// ---- Softmax (core/ops/softmax.h) ----
absl::Status Softmax(const ExecContext& ctx, const TensorView& x, const TensorView& y, float scale,
                     bool causal, const TensorView* padding_mask);
absl::Status SoftmaxBackward(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                             const TensorView& dx, float scale);

// ---- Fused attention (core/ops/attention.h); params without padding_mask, which the function
// takes from `padding_mask` (null: none). Unimplemented for a head dim above
// kAttentionMaxHeadDim. ----
absl::Status FusedAttention(const ExecContext& ctx, const TensorView& q, const TensorView& k,
                            const TensorView& v, const TensorView* padding_mask,
                            const AttentionParams& params, const TensorView& out,
                            const TensorView& lse);
absl::Status FusedAttentionBackward(const ExecContext& ctx, const TensorView& q,
                                    const TensorView& k, const TensorView& v, const TensorView& out,
                                    const TensorView& dout, const TensorView& lse,
                                    const TensorView* padding_mask, const AttentionParams& params,
                                    const TensorView& dq, const TensorView& dk,
                                    const TensorView& dv);

// ---- Ids and targets ----
// The first element of `ids` (i32/i64, called `name` in messages) outside [lo, hi), not counting
// -100 (kIgnoreIndex) when allow_ignore: its flat position and value; position -1 when there is
// none. Needs ctx.cuda; synchronizes the stream.
struct BadId {
  int64_t position = -1;
  int64_t value = 0;
};
absl::StatusOr<BadId> FindBadId(absl::string_view op, const ExecContext& ctx,
                                absl::string_view name, const TensorView& ids, int64_t lo,
                                int64_t hi, bool allow_ignore);

// ---- Embedding (core/ops/embedding.h); ids already checked with FindBadId ----
absl::Status Embedding(const ExecContext& ctx, const TensorView& ids, const TensorView& table,
                       const TensorView& out, int64_t vocab_start);
// Needs ctx.cuda (sort buffers). Bitwise the CPU result.
absl::Status EmbeddingBackward(const ExecContext& ctx, const TensorView& ids,
                               const TensorView& dout, const TensorView& dtable,
                               int64_t vocab_start);

// ---- Cross-entropy (core/ops/cross_entropy.h, sharded_cross_entropy.h); targets already
// checked with FindBadId ----
absl::Status CrossEntropy(const ExecContext& ctx, const TensorView& logits,
                          const TensorView& targets, const TensorView& losses);
absl::Status CrossEntropyBackward(const ExecContext& ctx, const TensorView& logits,
                                  const TensorView& targets, const TensorView& dlosses,
                                  const TensorView& dlogits);
// `valid` = the number of unmasked columns of the shard.
absl::Status ShardedRowMax(const ExecContext& ctx, const TensorView& logits, int64_t valid,
                           const TensorView& row_max);
absl::Status ShardedTargetAndSumExp(const ExecContext& ctx, const TensorView& logits,
                                    const TensorView& targets, int64_t valid, int64_t vocab_start,
                                    const TensorView& row_max, const TensorView& partials);
absl::Status ShardedLoss(const ExecContext& ctx, const TensorView& targets,
                         const TensorView& row_max, const TensorView& partials,
                         const TensorView& losses);
absl::Status ShardedCrossEntropyBackward(const ExecContext& ctx, const TensorView& logits,
                                         const TensorView& targets, int64_t valid,
                                         int64_t vocab_start, const TensorView& row_max,
                                         const TensorView& partials, const TensorView& dlosses,
                                         const TensorView& dlogits);

// ---- Heads permutations (core/ops/heads.h) ----
// Between token_major [B, T, G, slots, D] and the head-major tensors: slots r < per_group go to
// head_major[0] [B, G per_group, T, D] (head g per_group + r), slots per_group and per_group + 1
// to head_major[1] and [2] [B, G, T, D] (slots = 1, per_group = 1: one [B, G, T, D]).
absl::Status HeadsPermute(absl::string_view op, const ExecContext& ctx, int64_t b, int64_t t,
                          int64_t g, int64_t per_group, int64_t d, const TensorView& token_major,
                          const TensorView* const head_major[], int64_t slots, bool to_heads);

// ---- Reductions (core/ops/reduce.h) ----
// Needs ctx.cuda; synchronizes the stream.
absl::StatusOr<double> Reduce(absl::string_view op, const ExecContext& ctx, const TensorView& x,
                              ReduceOp kind);

// ---- Adam (core/ops/adam.h) ----
absl::Status AdamUpdate(const ExecContext& ctx, const TensorView& param, const TensorView& grad,
                        const TensorView& m, const TensorView& v, const AdamConstants& params);

// ---- GEMM through cuBLASLt (gemm_cuda.cc) ----
// `batch` row-major products C[M, N] = alpha op(A) op(B) + beta C, consecutive in memory: A and B
// of one dtype (f32, bf16, f16), C of theirs or f32, with f32 accumulation (CUBLAS_COMPUTE_32F, no
// TF32) and one rounding of a 16-bit C. beta = 0 does not read C; K = 0 or alpha = 0 does not
// read A and B. Plans (descriptors and the heuristic's algorithm) are cached per shape in
// ctx.cuda; shapes cuBLASLt has no kernel for fall back to cuBLAS (cublasGemmStridedBatchedEx).
// The epilogue (batch 1 and beta = 0 only, checked by the caller; core/ops/gemm.h): bias [N] (A's
// dtype or f32) added to every row, then GeLU when `gelu`, pre_activation [M, N] (C's dtype)
// receiving the value before GeLU; fused by cuBLASLt where it can, else applied by the BiasAdd and
// Gelu kernels to an f32 product. Needs ctx.cuda.
struct GemmDims : GemmShape {
  float alpha = 1.0f;
  float beta = 0.0f;
  const TensorView* bias = nullptr;
  bool gelu = false;
  const TensorView* pre_activation = nullptr;
};
absl::Status Gemm(absl::string_view op, const ExecContext& ctx, const TensorView& a,
                  const TensorView& b, const TensorView& c, const GemmDims& dims);

// ---- Modern decoder blocks (core/ops/rmsnorm.h, rope.h, swiglu.h; decoder_ops_cuda.cc) ----
absl::Status RmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                     float eps, const TensorView& y, const TensorView& rstd);
// Needs ctx.cuda (scratch for the dgamma partial sums).
absl::Status RmsNormBackward(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                             const TensorView& rstd, const TensorView& dy, const TensorView& dx,
                             const TensorView& dgamma);
// ops::Rope (sign 1) or ops::RopeBackward (sign -1; x = dy, y = dx), `op` naming which.
absl::Status Rope(absl::string_view op, const ExecContext& ctx, const TensorView& x, double base,
                  int64_t position_offset, float sign, const TensorView& y);
absl::Status SwiGlu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                    const TensorView& y);
absl::Status SwiGluBackward(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                            const TensorView& dy, const TensorView& dgate, const TensorView& dup);

}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_OPS_CUDA_H_
