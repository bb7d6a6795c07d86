// The interface of one block of a TransformerStack (nn/transformer.h), and the factory that builds
// the blocks: what a model-variant package implements to put a block of its own (another residual
// wiring, parallel attention and MLP, ...) into the stack while reusing the stack's buffers,
// activation accounting and gradient-ready notifications.
//
// A block maps [B, T, H] to [B, T, H] in the store's compute dtype, declares its parameters in the
// ParameterStore when it is created (in forward order; the stack relies on that to tell the
// data-parallel reducer, after each block's Backward, that the block's gradients are final), and
// accumulates their gradients in Backward.
#ifndef MT_NN_LAYER_H_
#define MT_NN_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {

class Layer {
 public:
  virtual ~Layer() = default;
  // x: [B, T, H], kept alive (unchanged) by the caller until Backward; padding_mask: null or i32
  // [B, T] (0 = padding), likewise kept alive; y: [B, T, H], distinct from x.
  virtual absl::Status Forward(const StepContext& sc, const TensorView& x,
                               const TensorView* padding_mask, const TensorView& y) = 0;
  // dy: [B, T, H]; dx: [B, T, H], overwritten, distinct from dy. Called once per Forward, with
  // the StepContext of that Forward.
  virtual absl::Status Backward(const StepContext& sc, const TensorView& dy,
                                const TensorView& dx) = 0;
  // Bytes of activations this block holds now (excluding its input).
  virtual int64_t ActivationBytes() const = 0;
  // Bytes it held at the start of its last Backward (after any recomputation).
  virtual int64_t backward_peak_bytes() const = 0;
};

// Builds block `layer_index` (0-based; for dropout streams and initialisation scales), declaring
// its parameters in `store` under `prefix` ("<stack prefix>.<layer_index>").
using LayerFactory = std::function<absl::StatusOr<std::unique_ptr<Layer>>(
    ParameterStore* store, const std::string& prefix, int layer_index)>;

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_LAYER_H_
