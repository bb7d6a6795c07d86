// Raw CUDA launchers, callable from host C++ without CUDA headers. Pointers are device pointers;
// `stream` is a cudaStream_t (null: the default stream). Every launcher checks the last CUDA error
// after each kernel launch (and the return code of every runtime call it makes) and reports the
// first failure with the source line that detected it; ops_cuda.cc turns that into a Status.
//
// Launchers do no argument checking beyond what the kernels need to stay in bounds: callers
// (core/ops through ops_cuda.cc) have validated shapes, dtypes and devices. Element counts are
// int64; sizes that a kernel cannot index are the caller's to reject (stated per launcher).
// Kernels and their launchers live in the .cu files named in the comments below.
#ifndef MT_CORE_CUDA_LAUNCHERS_H_
#define MT_CORE_CUDA_LAUNCHERS_H_

#include <cstddef>
#include <cstdint>

#include "core/adam_constants.h"

namespace mt {
namespace cuda {

enum class ElemType { kF32, kBF16, kF16 };
enum class IdType { kI32, kI64 };

// What a launcher reports: the cudaError_t (0 = success) and where it was detected.
struct LaunchResult {
  int error = 0;
  const char* file = "";
  int line = 0;
  bool ok() const { return error == 0; }
};

// ---- bias_add.cu ----

// y[r, c] = x[r, c] + bias[c] for r < rows, c < cols; y may alias x.
LaunchResult LaunchBiasAdd(ElemType type, const void* x, const void* bias, void* y, int64_t rows,
                           int64_t cols, void* stream);

// ---- elementwise.cu: math in f32, one rounding to the element type; outputs may alias inputs.

enum class UnaryOp {
  kGelu,     // y = GeLU(x), the tanh approximation
  kGeluErf,  // y = x Phi(x), the exact GeLU
  kTanh,     // y = tanh(x)
  kScale,    // y = alpha * x
};
LaunchResult LaunchUnary(ElemType type, UnaryOp op, const void* x, void* y, int64_t n, float alpha,
                         void* stream);

enum class BinaryOp {
  kAdd,              // out = a + b
  kGeluBackward,     // out = b * GeLU'(a)            (a = x, b = dy)
  kGeluErfBackward,  // out = b * (x Phi(x))'(a)      (a = x, b = dy)
  kTanhBackward,     // out = b * (1 - a) * (1 + a)   (a = y = tanh(x), b = dy)
};
LaunchResult LaunchBinary(ElemType type, BinaryOp op, const void* a, const void* b, void* out,
                          int64_t n, void* stream);

// y = x converted (round to nearest even); from != to, no overlap.
LaunchResult LaunchConvert(ElemType from, ElemType to, const void* x, void* y, int64_t n,
                           void* stream);

// Every element of x (elem_bytes = 2, 4 or 8 bytes each) set to the bit pattern at `pattern`.
LaunchResult LaunchFill(const void* pattern, int elem_bytes, void* x, int64_t n, void* stream);

// Dropout: element i is kept iff PhiloxUniform(seed, stream_id, key(i)) >= p, with
// key(i) = key_base + (i / key_inner) * key_outer_stride + i % key_inner (key_inner <= 0: i), the
// definition of ops::DropoutKey (core/ops/elementwise.h); kept elements are multiplied by `scale`
// (= 1 / (1 - p), computed by the caller in f32), dropped ones are 0. p > 0.
struct DropoutParams {
  float p = 0.0f;
  float scale = 1.0f;
  uint64_t seed = 0;
  uint64_t stream_id = 0;
  int64_t key_base = 0;
  int64_t key_inner = 0;
  int64_t key_outer_stride = 0;
};
LaunchResult LaunchDropout(ElemType type, const void* x, void* y, int64_t n,
                           const DropoutParams& params, void* stream);
// out[i] = residual[i] + dropout(x[i] + bias[i % cols]) for i < n (bias null: no bias), with
// LaunchDropout's mask and scale (p = 0: no mask); each f32 operation explicitly rounded (no FMA
// contraction), then one rounding to the element type. out may alias x or residual. cols > 0.
LaunchResult LaunchBiasDropoutAdd(ElemType type, const void* x, const void* bias,
                                  const void* residual, void* out, int64_t n, int64_t cols,
                                  const DropoutParams& params, void* stream);

// ---- column_sum.cu: per-column sums over rows, deterministic (fixed row blocks, fixed order).

// Floats of scratch that LaunchBiasGrad needs for [rows, cols].
int64_t BiasGradScratchFloats(int64_t rows, int64_t cols);
// dbias[c] = sum_r dy[r, c], summed in f32 and rounded once to out_type (dy's type or f32);
// `scratch` holds BiasGradScratchFloats floats.
LaunchResult LaunchBiasGrad(ElemType type, ElemType out_type, const void* dy, void* dbias,
                            int64_t rows, int64_t cols, float* scratch, void* stream);

// ---- layernorm.cu: one warp per row, statistics in f32 (two-pass mean and variance). ----

// `param` is the dtype of gamma/beta (f32 or x's). mean, rstd: [rows] f32. y may alias x.
LaunchResult LaunchLayerNorm(ElemType type, ElemType param, const void* x, const void* gamma,
                             const void* beta, float eps, void* y, float* mean, float* rstd,
                             int64_t rows, int64_t cols, void* stream);
// Floats of scratch that LaunchLayerNormBackward needs.
int64_t LayerNormBackwardScratchFloats(int64_t rows, int64_t cols);
// dx, and dgamma/dbeta (OVERWRITTEN, in `param`'s dtype). dx may alias dy or x.
LaunchResult LaunchLayerNormBackward(ElemType type, ElemType param, const void* x,
                                     const void* gamma, const float* mean, const float* rstd,
                                     const void* dy, void* dx, void* dgamma, void* dbeta,
                                     int64_t rows, int64_t cols, float* scratch, void* stream);

// ---- softmax.cu: one warp per row of Tk. ----

// rows = numel / Tk; row r is query r % Tq; padding_mask (may be null) is [rows / rows_per_b, Tk]
// i32. y may alias x.
LaunchResult LaunchSoftmax(ElemType type, const void* x, void* y, int64_t rows, int64_t tq,
                           int64_t tk, float scale, bool causal, const int32_t* padding_mask,
                           int64_t rows_per_b, void* stream);
// dx = scale * y * (dy - sum(dy * y)); dx may alias dy or y.
LaunchResult LaunchSoftmaxBackward(ElemType type, const void* y, const void* dy, void* dx,
                                   int64_t rows, int64_t tk, float scale, void* stream);

// ---- attention.cu: fused attention (core/ops/attention.h), f32 math, no [tq, tk] buffer. ----

// The largest head dim the attention kernels take (registers and shared memory are sized by it).
constexpr int64_t kAttentionMaxHeadDim = 128;
// q, out, dq, dout: [batch_heads, tq, d]; k, v, dk, dv: [batch_heads, tk, d]; lse: [batch_heads,
// tq] f32; padding_mask: [batch_heads / heads, tk] i32 (0 = padded key) or null. Query i sees key
// j iff j <= i + tk - tq (when causal) and the mask allows j. Dropout (dropout.p > 0) keeps
// probability element (bh, i, j) iff PhiloxUniform(seed, stream_id, key((bh * tq + i) * tk + j))
// >= p with LaunchDropout's key(); kept elements are multiplied by dropout.scale. Requires
// 0 <= d <= kAttentionMaxHeadDim (else cudaErrorInvalidValue).
struct AttentionParams {
  int64_t batch_heads = 0;  // B * NH
  int64_t heads = 1;        // NH
  int64_t groups = 1;       // G: key/value heads of k and v [B, G, tk, d]; divides NH
  int64_t tq = 0;
  int64_t tk = 0;
  int64_t d = 0;
  float scale = 1.0f;
  bool causal = false;
  const int32_t* padding_mask = nullptr;
  DropoutParams dropout;
};
// out and lse (log-sum-exp of the scaled visible scores; -inf and a zero row when none).
LaunchResult LaunchFusedAttention(ElemType type, const void* q, const void* k, const void* v,
                                  void* out, float* lse, const AttentionParams& params,
                                  void* stream);
// dq, dk, dv (overwritten) from the forward's out and lse: one kernel per key tile of a key/value
// head for dk and dv (summing its query heads in order), one per query tile for dq (no atomics;
// deterministic).
LaunchResult LaunchFusedAttentionBackward(ElemType type, const void* q, const void* k,
                                          const void* v, const void* out, const void* dout,
                                          const float* lse, void* dq, void* dk, void* dv,
                                          const AttentionParams& params, void* stream);

// ---- embedding.cu ----

// Finds the smallest position n < count whose id lies outside [lo, hi) (and is not -100 when
// allow_ignore): atomically min-reduced into *first_bad, which the caller sets to all ones
// (UINT64_MAX) beforehand and which stays so when every id is valid.
LaunchResult LaunchFindBadId(IdType id_type, const void* ids, int64_t count, int64_t lo, int64_t hi,
                             bool allow_ignore, unsigned long long* first_bad, void* stream);
// out[n, :] = table[ids[n] - vocab_start, :] when that row is in [0, V), else zeros; a bitwise
// copy of elements of elem_bytes (2 or 4) bytes.
LaunchResult LaunchEmbedding(IdType id_type, int elem_bytes, const void* ids, const void* table,
                             void* out, int64_t n, int64_t v, int64_t c, int64_t vocab_start,
                             void* stream);
// Bytes of scratch that LaunchEmbeddingBackward needs (0 on a CUDA error, which the launch then
// reports). Requires n, v < 2^31 - 1.
size_t EmbeddingBackwardScratchBytes(int64_t n, int64_t v);
// dtable[r] += dout[n] for every n with ids[n] - vocab_start = r in [0, V), ACCUMULATING in f32 in
// increasing n from dtable's value and rounding once: a stable radix sort groups the positions by
// row (no float atomics), so the result is bitwise that of the CPU kernel.
LaunchResult LaunchEmbeddingBackward(ElemType type, IdType id_type, const void* ids,
                                     const void* dout, void* dtable, int64_t n, int64_t v,
                                     int64_t c, int64_t vocab_start, void* scratch,
                                     size_t scratch_bytes, void* stream);

// ---- cross_entropy.cu: one block per row; targets checked by the caller. ----

LaunchResult LaunchCrossEntropy(ElemType type, IdType id_type, const void* logits,
                                const void* targets, float* losses, int64_t n, int64_t v,
                                void* stream);
LaunchResult LaunchCrossEntropyBackward(ElemType type, IdType id_type, const void* logits,
                                        const void* targets, const float* dlosses, void* dlogits,
                                        int64_t n, int64_t v, void* stream);
// The vocab-parallel phases (core/ops/sharded_cross_entropy.h), f32 logits [n, v] of which the
// first `valid` columns are real.
LaunchResult LaunchShardedRowMax(const float* logits, float* row_max, int64_t n, int64_t v,
                                 int64_t valid, void* stream);
LaunchResult LaunchShardedTargetAndSumExp(IdType id_type, const float* logits, const void* targets,
                                          const float* row_max, float* partials, int64_t n,
                                          int64_t v, int64_t valid, int64_t vocab_start,
                                          void* stream);
LaunchResult LaunchShardedLoss(IdType id_type, const void* targets, const float* row_max,
                               const float* partials, float* losses, int64_t n, void* stream);
LaunchResult LaunchShardedCrossEntropyBackward(IdType id_type, const float* logits,
                                               const void* targets, const float* row_max,
                                               const float* partials, const float* dlosses,
                                               float* dlogits, int64_t n, int64_t v, int64_t valid,
                                               int64_t vocab_start, void* stream);

// ---- heads.cu: pure permutations of elem_bytes (1, 2, 4 or 8) byte elements. ----

// Between token-major [B, T, G, slots, D] and head-major tensors: slot r < per_group is head
// g per_group + r of head_major[0] [B, G per_group, T, D]; slots per_group and per_group + 1 (when
// slots = per_group + 2) are head g of head_major[1] and [2] [B, G, T, D]. slots = per_group = 1:
// one [B, G, T, D] tensor. to_heads copies token-major -> head-major.
LaunchResult LaunchHeadsPermute(int elem_bytes, int64_t b, int64_t t, int64_t g, int64_t per_group,
                                int64_t d, int64_t slots, void* token_major,
                                void* const head_major[3], bool to_heads, void* stream);

// ---- reduce.cu: whole-tensor reductions in f64, fixed tree (deterministic). ----

enum class ReduceOp { kSum, kSumOfSquares, kMax };
// Doubles of scratch that LaunchReduce needs for n elements.
int64_t ReduceScratchDoubles(int64_t n);
// The result lands in scratch[0] (NaN if any element is NaN for kMax; -inf / 0 when n = 0).
LaunchResult LaunchReduce(ElemType type, ReduceOp op, const void* x, int64_t n, double* scratch,
                          void* stream);

// ---- adam.cu ----

// The per-element update of core/ops/adam.h in f32, each operation rounded as written there
// (no fused multiply-adds), with the CPU's constants (core/adam_constants.h).
LaunchResult LaunchAdam(float* param, const float* grad, float* m, float* v, int64_t n,
                        const AdamConstants& params, void* stream);

// ---- rmsnorm.cu: one block per row, statistics in f32 (core/ops/rmsnorm.h). ----

// `param` is the dtype of gamma/dgamma (f32 or x's). rstd: [rows] f32. y may alias x.
LaunchResult LaunchRmsNorm(ElemType type, ElemType param, const void* x, const void* gamma,
                           float eps, void* y, float* rstd, int64_t rows, int64_t cols,
                           void* stream);
// Floats of scratch that LaunchRmsNormBackward needs.
int64_t RmsNormBackwardScratchFloats(int64_t rows, int64_t cols);
// dx, and dgamma (OVERWRITTEN, in `param`'s dtype; deterministic column sums). dx may alias dy
// or x.
LaunchResult LaunchRmsNormBackward(ElemType type, ElemType param, const void* x, const void* gamma,
                                   const float* rstd, const void* dy, void* dx, void* dgamma,
                                   int64_t rows, int64_t cols, float* scratch, void* stream);

// ---- rope.cu: rotary position embedding, rotate-half pairs (core/ops/rope.h). ----

// x, y: [outer, seq, head_dim] (head_dim even); row t of each [seq, head_dim] block is at
// position position_offset + t. cos and sin of each angle are computed in double in the kernel
// (once per (t, pair) per block) and rounded to f32; sin is multiplied by `sign` (-1: the
// backward). y may alias x.
struct RopeParams {
  int64_t outer = 0;
  int64_t seq = 0;
  int64_t head_dim = 0;
  double base = 10000.0;
  int64_t position_offset = 0;
  float sign = 1.0f;
};
LaunchResult LaunchRope(ElemType type, const void* x, void* y, const RopeParams& params,
                        void* stream);

// ---- swiglu.cu: y = silu(gate) * up and its backward, f32 math (core/ops/swiglu.h). ----

// y may alias gate or up.
LaunchResult LaunchSwiGlu(ElemType type, const void* gate, const void* up, void* y, int64_t n,
                          void* stream);
// dgate and dup may alias gate, up or dy (not each other).
LaunchResult LaunchSwiGluBackward(ElemType type, const void* gate, const void* up, const void* dy,
                                  void* dgate, void* dup, int64_t n, void* stream);

}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_LAUNCHERS_H_
