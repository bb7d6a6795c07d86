// Tensor-parallel MLPs, and the interface through which a TransformerLayer holds either
// (nn/transformer.h: LayerSpec::mlp). Both do one all-reduce forward (g, in the row-parallel output
// projection) and one backward (f, on the input gradient), keep activations in the store's compute
// dtype, own what they save for Backward (Release() frees it) and keep a view of their input (the
// caller keeps it alive until Backward).
//
//   ParallelMLP (GPT-2, BERT): y = RowParallel(GeLU(ColumnParallel(x))), with biases
//     "<prefix>.fc1.{weight,bias}" [H, F], [F]; "<prefix>.fc2.{weight,bias}" [F, H], [H].
//     fc1's bias and the GeLU run in its GEMM's fused epilogue (ColumnParallelLinear::ForwardGelu),
//     which also writes the pre-activation GeluBackward needs. With ops::GeluForm::kErf (the
//     published BERT's exact GeLU) the GEMM adds the bias and ops::Gelu(kErf) follows.
//   SwiGluMLP (PaLM, LLaMA): y = down(silu(gate(x)) * up(x)), no biases
//     "<prefix>.gate.weight", "<prefix>.up.weight" [H, F], both column-parallel (split on F, so
//     every rank holds matching gate and up columns, and the initial values do not depend on the
//     TP degree); "<prefix>.down.weight" [F, H], row-parallel, initialised with output_init_std.
//     Backward sums the input gradients of gate and up before the single f all-reduce. It saves
//     gate(x) and up(x) and recomputes silu(gate) * up in Backward (bitwise the forward's value)
//     rather than keeping a third [N, F / tp] buffer.
#ifndef MT_NN_MLP_H_
#define MT_NN_MLP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/linear.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

class Mlp {
 public:
  virtual ~Mlp() = default;
  // x: [N, H] (kept by the caller until Backward); y: [N, H]. deferred_bias: as for
  // RowParallelLinear::Forward (the output projection's bias; null when it has none). Overrides
  // keep the same default. An MLP created with TpReduce::kPartial leaves y as this rank's partial
  // product (no all-reduce, no bias: a biased one needs deferred_bias) and dx in Backward as its
  // partial input gradient (no all-reduce), for the caller to reduce with another module's.
  virtual absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y,
                               const TensorView** deferred_bias = nullptr) = 0;
  // dy: [N, H]; dx: [N, H] (complete: all-reduced over TP). FailedPrecondition without a saved
  // Forward.
  virtual absl::Status Backward(const StepContext& sc, const TensorView& dy,
                                const TensorView& dx) = 0;
  virtual void Release() = 0;
  // Bytes of activations held now (excluding the input).
  virtual int64_t ActivationBytes() const = 0;
};

class ParallelMLP : public Mlp {
 public:
  ParallelMLP() = default;
  // InvalidArgument if ffn is not divisible by the TP size.
  static absl::StatusOr<ParallelMLP> Create(ParameterStore* store, const std::string& prefix,
                                            int64_t hidden, int64_t ffn, double init_std,
                                            double output_init_std,
                                            TpReduce reduce = TpReduce::kYes,
                                            ops::GeluForm gelu = ops::GeluForm::kTanh);
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y,
                       const TensorView** deferred_bias = nullptr) override;
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx) override;
  void Release() override;
  int64_t ActivationBytes() const override { return pre_.nbytes() + act_.nbytes(); }

 private:
  DType dtype_ = DType::kF32;  // The store's compute dtype.
  TpReduce reduce_ = TpReduce::kYes;
  ops::GeluForm gelu_ = ops::GeluForm::kTanh;
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
  TensorView x_;
  Tensor pre_;  // [N, ffn / tp] before GeLU
  Tensor act_;  // [N, ffn / tp] after GeLU
};

class SwiGluMLP : public Mlp {
 public:
  SwiGluMLP() = default;
  // InvalidArgument if ffn is not divisible by the TP size.
  static absl::StatusOr<SwiGluMLP> Create(ParameterStore* store, const std::string& prefix,
                                          int64_t hidden, int64_t ffn, double init_std,
                                          double output_init_std, TpReduce reduce = TpReduce::kYes);
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y,
                       const TensorView** deferred_bias = nullptr) override;
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx) override;
  void Release() override;
  int64_t ActivationBytes() const override { return gate_out_.nbytes() + up_out_.nbytes(); }

 private:
  DType dtype_ = DType::kF32;  // The store's compute dtype.
  TpReduce reduce_ = TpReduce::kYes;
  ColumnParallelLinear gate_, up_;
  RowParallelLinear down_;
  TensorView x_;
  Tensor gate_out_;  // [N, ffn / tp] = x W_gate
  Tensor up_out_;    // [N, ffn / tp] = x W_up
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_MLP_H_
