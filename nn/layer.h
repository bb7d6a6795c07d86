// The interface of one block of a TransformerStack (nn/transformer.h), and the factory that builds
// the blocks: what a model-variant package implements to put a block of its own (another residual
// wiring, parallel attention and MLP, ...) into the stack while reusing the stack's buffers,
// activation accounting and gradient-ready notifications.
//
// A block maps [B, T, H] to [B, T, H] in the store's compute dtype, declares its parameters in the
// ParameterStore when it is created (in forward order; the stack relies on that to tell the
// data-parallel reducer, after each block's Backward, that the block's gradients are final), and
// accumulates their gradients in Backward.
//
// Incremental decoding (text generation with a key/value cache) is optional: a block that caches
// its attention's keys and values overrides StartDecoding / DecodeForward / StopDecoding
// (TransformerLayer does); the defaults return Unimplemented, so a custom block without them still
// trains, and a model built on it reports Unimplemented for decoding.
#ifndef MT_NN_LAYER_H_
#define MT_NN_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
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

  // ---- Incremental decoding (eval mode whatever sc.mode says: no dropout; nothing is kept for
  // Backward, which fails with FailedPrecondition until the next Forward).
  //
  // Allocates this block's cache on sc.exec->device for `batch` sequences of up to `max_length`
  // positions, forgetting any earlier one. InvalidArgument for sizes < 1; ResourceExhausted when
  // the device is out of memory; FailedPrecondition for a block that cannot decode causally
  // (bidirectional attention); Unimplemented (the default) for a block without a cache.
  virtual absl::Status StartDecoding(const StepContext& sc, int64_t batch, int64_t max_length) {
    (void)sc;
    (void)batch;
    (void)max_length;
    return absl::UnimplementedError(
        "this transformer block has no incremental decoding (nn::Layer::StartDecoding)");
  }
  // x: [B, n, H], positions c .. c + n - 1 of each of the B started sequences, where c is the
  // number of positions cached so far; y: [B, n, H], distinct from x. Position c + i attends to
  // positions 0 .. c + i (the cached ones and the new ones up to itself), and the n positions join
  // the cache. FailedPrecondition before StartDecoding; InvalidArgument for another B, a
  // shape or dtype that does not fit, or c + n > max_length.
  virtual absl::Status DecodeForward(const StepContext& sc, const TensorView& x,
                                     const TensorView& y) {
    (void)sc;
    (void)x;
    (void)y;
    return absl::UnimplementedError(
        "this transformer block has no incremental decoding (nn::Layer::DecodeForward)");
  }
  // The slotted step (continuous batching): x [N, H], the rows of `spans` packed (span s: the
  // next `count` positions of the sequence in cache slot `slot`, after the positions that slot
  // holds; nn/context.h DecodeSpan); y [N, H], distinct from x. Each sequence attends only to its
  // own slot, and its rows' outputs must not depend on the other spans (batch invariance).
  // FailedPrecondition before StartDecoding; InvalidArgument for a bad span (slot out of range
  // or given twice, count < 1, past max_length) or shape.
  virtual absl::Status DecodeSlots(const StepContext& sc, const TensorView& x,
                                   absl::Span<const DecodeSpan> spans, const TensorView& y) {
    (void)sc;
    (void)x;
    (void)spans;
    (void)y;
    return absl::UnimplementedError(
        "this transformer block has no slotted decoding (nn::Layer::DecodeSlots)");
  }
  // Empties one slot (its sequence is forgotten; the next span starts at position 0).
  virtual absl::Status ResetSlot(int64_t slot) {
    (void)slot;
    return absl::UnimplementedError("this transformer block has no slotted decoding");
  }
  // Frees the cache (decoding must start again).
  virtual void StopDecoding() {}

  // Whether the block runs with sequence parallelism (nn/sequence_parallel.h: x and y are this
  // rank's slices [B, T / tp, H]). A model asked for sequence parallelism refuses blocks that
  // do not.
  virtual bool sequence_parallel() const { return false; }
  // Whether the block honours context parallelism (nn/context_parallel.h: with sc.cp_size() > 1,
  // x and y hold this rank's two chunks chunk-major, [2B, c, H], and its dropouts and attention
  // treat them so). A model asked for context parallelism refuses blocks that do not.
  virtual bool context_parallel() const { return false; }
};

// The forward input a block keeps for Backward (and for recomputing its forward under activation
// checkpointing): x and the padding mask as views. The caller keeps their memory alive until
// Backward (Layer::Forward's contract), not the TensorView objects, so the mask's view is copied.
class SavedInput {
 public:
  void Save(const TensorView& x, const TensorView* padding_mask) {
    x_ = x;
    has_mask_ = padding_mask != nullptr;
    if (has_mask_) mask_ = *padding_mask;
  }
  // Nothing kept (a decoding step keeps nothing for Backward).
  void Clear() {
    x_.data = nullptr;
    has_mask_ = false;
  }
  bool empty() const { return x_.data == nullptr; }
  const TensorView& x() const { return x_; }
  // Null when Forward had no mask.
  const TensorView* padding_mask() const { return has_mask_ ? &mask_ : nullptr; }

 private:
  TensorView x_;
  TensorView mask_;
  bool has_mask_ = false;
};

// Builds block `layer_index` (0-based; for dropout streams and initialisation scales), declaring
// its parameters in `store` under `prefix` ("<stack prefix>.<layer_index>").
using LayerFactory = std::function<absl::StatusOr<std::unique_ptr<Layer>>(
    ParameterStore* store, const std::string& prefix, int layer_index)>;

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_LAYER_H_
