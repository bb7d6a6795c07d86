// Normalisation modules over the last dim of [N, H] activations, and the interface through which
// a TransformerLayer holds either (nn/transformer.h: LayerSpec::norm).
//
//   LayerNormModule: y = (x - mean) * rstd * gamma + beta   "<prefix>.weight" (ones), ".bias"
//   (zeros) RmsNormModule:   y = x * rstd * gamma                   "<prefix>.weight" (ones)
//
// Parameters are replicated on the TP ranks and have no weight decay. x and y are in any float
// dtype (the store's compute dtype); gamma/beta are read as the f32 MASTER weights
// (ParameterStore::value, which the ops accept next to a 16-bit x), statistics are computed in f32
// and parameter gradients accumulate in f32, never rounded to 16 bits.
// Each module saves a view of its input (the caller keeps it alive until Backward) and owns its
// row statistics (reallocated only when the row count or device changes); Release() frees them.
#ifndef MT_NN_NORM_H_
#define MT_NN_NORM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

class Norm {
 public:
  virtual ~Norm() = default;
  // x, y: [N, H] of one float dtype; saves x (a view).
  virtual absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y) = 0;
  // dy: [N, H]; dx: [N, H], overwritten (may not alias dy); parameter gradients accumulated.
  // FailedPrecondition without a saved Forward.
  virtual absl::Status Backward(const StepContext& sc, const TensorView& dy,
                                const TensorView& dx) = 0;
  // Frees the saved statistics (activation checkpointing).
  virtual void Release() = 0;
  // Bytes of activations held now (the statistics; the input belongs to the caller).
  virtual int64_t ActivationBytes() const = 0;
};

class LayerNormModule : public Norm {
 public:
  LayerNormModule() = default;
  static absl::StatusOr<LayerNormModule> Create(ParameterStore* store, const std::string& prefix,
                                                int64_t hidden, float eps);
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y) override;
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx) override;
  void Release() override;
  int64_t ActivationBytes() const override { return mean_.nbytes() + rstd_.nbytes(); }

 private:
  ParameterStore* store_ = nullptr;
  int gamma_ = -1, beta_ = -1;
  float eps_ = 1e-5f;
  TensorView x_;
  Tensor mean_, rstd_, dgamma_, dbeta_;
};

class RmsNormModule : public Norm {
 public:
  RmsNormModule() = default;
  // InvalidArgument for hidden < 1 or an eps that is not finite and >= 0.
  static absl::StatusOr<RmsNormModule> Create(ParameterStore* store, const std::string& prefix,
                                              int64_t hidden, float eps);
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView& y) override;
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx) override;
  void Release() override;
  int64_t ActivationBytes() const override { return rstd_.nbytes(); }

 private:
  ParameterStore* store_ = nullptr;
  int gamma_ = -1;
  float eps_ = 1e-5f;
  TensorView x_;
  Tensor rstd_;    // f32 [N]
  Tensor dgamma_;  // f32 [H], scratch for the op's overwritten gradient
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_NORM_H_
