// Tensor-parallel linear layers (Megatron's ColumnParallelLinear and RowParallelLinear).
//
// Weights are stored [in, out] (y = x W + b) with the GLOBAL shape declared in the ParameterStore:
//   ColumnParallelLinear: W [in, out] split on dim 1, b [out] split on dim 0. Input replicated on
//     the TP ranks, output partitioned: y_r = x W_r + b_r. Its input passes through f (identity
//     forward, all-reduce of the input gradient backward).
//   RowParallelLinear: W [in, out] split on dim 0, b [out] replicated. Input partitioned along its
//     last dim, output replicated: y = g(x_r W_r) + b, g = all-reduce forward, identity backward;
//     the bias is added ONCE, after the all-reduce.
// Activations are 2-D [N, features] in the store's compute dtype (f32, bf16 or f16); the caller
// owns all activation buffers and keeps the forward input alive until Backward. Forward and
// Backward read the compute-dtype weights (ParameterStore::compute_value); Backward ACCUMULATES
// into the f32 parameter gradients in f32 (mixed-precision GEMM and bias sums, no 16-bit
// rounding of the gradients).
// The bias (and ColumnParallelLinear::ForwardGelu's GeLU) runs in the GEMM's fused epilogue
// (core/ops/gemm.h: cuBLASLt's on CUDA), so a 16-bit y is rounded once. RowParallelLinear can fuse
// its bias only at TP = 1 (sc.tp null); with TP > 1 it is added after the all-reduce.
#ifndef MT_NN_LINEAR_H_
#define MT_NN_LINEAR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

enum class Bias { kNo, kYes };

// Whether a tensor-parallel module completes its own reduction over the TP ranks (Megatron's g
// all-reduce after its row-parallel output in forward, f all-reduce of its input gradient in
// backward), or leaves this rank's partial sum for the caller, who sums the partials of several
// modules and reduces them once (a block running attention and the MLP side by side: one
// all-reduce each way instead of two).
enum class TpReduce { kYes, kPartial };
// Whether a backward writes the input gradient or adds to it.
enum class InputGrad { kOverwrite, kAccumulate };

class ColumnParallelLinear {
 public:
  ColumnParallelLinear() = default;
  // Declares "<prefix>.weight" [in, out] and "<prefix>.bias" [out].
  static absl::StatusOr<ColumnParallelLinear> Create(ParameterStore* store,
                                                     const std::string& prefix, int64_t in,
                                                     int64_t out, Bias bias, double init_std);
  // x: [N, in]; y: [N, out / tp].
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y) const;
  // y = GeLU(x W_r + b_r) and pre = x W_r + b_r (what ops::GeluBackward needs) from one GEMM.
  // x: [N, in]; pre, y: [N, out / tp], distinct.
  absl::Status ForwardGelu(const StepContext& sc, const TensorView& x, const TensorView& pre,
                           const TensorView& y) const;
  // dy: [N, out / tp]; x: the forward input; dx: [N, in], all-reduced over TP (complete).
  absl::Status Backward(const StepContext& sc, const TensorView& x, const TensorView& dy,
                        const TensorView& dx);
  // Backward without f's all-reduce, for several projections of one input (SwiGluMLP's gate and
  // up): the parameter gradients accumulate as in Backward, and dx receives only this rank's
  // contribution dy W_r^T, written (kOverwrite) or added to dx's value (kAccumulate, a GEMM with
  // beta = 1: a 16-bit dx is rounded after each term). The caller sums the contributions of all
  // the projections, then all-reduces the sum once (FBackward). Backward is BackwardLocal with
  // kOverwrite followed by FBackward.
  absl::Status BackwardLocal(const StepContext& sc, const TensorView& x, const TensorView& dy,
                             const TensorView& dx, InputGrad mode);
  int64_t in() const { return in_; }
  int64_t local_out() const { return local_out_; }

 private:
  ParameterStore* store_ = nullptr;
  int weight_ = -1, bias_ = -1;
  int64_t in_ = 0, local_out_ = 0;
  Tensor bias_scratch_;
};

class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  // Declares "<prefix>.weight" [in, out] and "<prefix>.bias" [out].
  static absl::StatusOr<RowParallelLinear> Create(ParameterStore* store, const std::string& prefix,
                                                  int64_t in, int64_t out, Bias bias,
                                                  double init_std);
  // x: [N, in / tp]; y: [N, out], identical on all TP ranks (one all-reduce). With deferred_bias
  // non-null, a bias that would be added in a pass of its own (TP > 1: after the all-reduce) is
  // left out of y and *deferred_bias points to it (the compute-dtype [out] value), for the caller
  // to fuse into its next op (ops::BiasDropoutAdd); otherwise (no bias, or the bias joins the
  // GEMM's epilogue at TP = 1) *deferred_bias is set to null. Backward is the same either way: dy
  // is the gradient with respect to y + bias.
  // With TpReduce::kPartial, y = x W_r is this rank's partial product, neither all-reduced nor
  // biased, and *deferred_bias (required when there is a bias: InvalidArgument otherwise) is the
  // bias to add once after the caller's all-reduce (GForward).
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y,
                       const TensorView** deferred_bias = nullptr,
                       TpReduce reduce = TpReduce::kYes) const;
  // dy: [N, out] (replicated); x: the forward input; dx: [N, in / tp].
  absl::Status Backward(const StepContext& sc, const TensorView& x, const TensorView& dy,
                        const TensorView& dx);
  int64_t local_in() const { return local_in_; }
  int64_t out() const { return out_; }

 private:
  ParameterStore* store_ = nullptr;
  int weight_ = -1, bias_ = -1;
  int64_t local_in_ = 0, out_ = 0;
  Tensor bias_scratch_;
};

// The f backward (all-reduce of an input gradient) and g forward (all-reduce of a partial output)
// over sc.tp, through comm/mappings.h; no-ops when sc.tp is null (TP = 1).
absl::Status FBackward(const StepContext& sc, const TensorView& dx);
absl::Status GForward(const StepContext& sc, const TensorView& y);

// Accumulates the column sums of dy [N, C] (any float dtype) into grad [C] (f32, or dy's dtype)
// through scratch [C] of grad's dtype; the sums are formed in f32.
absl::Status AccumulateBiasGrad(const StepContext& sc, const TensorView& dy, const TensorView& grad,
                                Tensor* scratch);

// Declares the parameters of y = x W (+ b) in `store`: "<prefix>.weight" [in, out] (normal init
// with init_std, weight decay) split over TP on weight_split_dim and, with Bias::kYes,
// "<prefix>.bias" [out] (zeros, no decay) split on bias_split_dim (-1: replicated). Sets *weight
// and *bias_index to their indices (*bias_index = -1 without a bias).
absl::Status DeclareLinear(ParameterStore* store, const std::string& prefix, int64_t in,
                           int64_t out, Bias bias, double init_std, int weight_split_dim,
                           int bias_split_dim, int* weight, int* bias_index);

// The local backward of y = x W (+ b) with W = store's `weight` [in, out] and b = its `bias`
// (< 0: none), as every linear layer runs it on its own slice: dW += x^T dy, db += column sums of
// dy (through bias_scratch), and dx = dy W^T (dx += dy W^T with `accumulate_dx`).
absl::Status LinearBackwardLocal(const StepContext& sc, ParameterStore& store, int weight, int bias,
                                 const TensorView& x, const TensorView& dy, const TensorView& dx,
                                 bool accumulate_dx, Tensor* bias_scratch);

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_LINEAR_H_
