// Incremental decoding, a capability of a models::Model (model.h: Model::incremental_decoder()):
// text generation (serve/generate.h) with a key/value cache, each step running only the new
// positions. Language models built on nn::TransformerStack implement it (GptModel, and so the GPT
// family's variants); a model whose blocks keep no cache (nn::Layer's defaults, as the parallel
// block's) reports Unimplemented from StartDecoding.
#ifndef MT_MODELS_INCREMENTAL_DECODER_H_
#define MT_MODELS_INCREMENTAL_DECODER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "models/model.h"
#include "nn/context.h"

namespace mt {
namespace models {

// In eval mode (no dropout) whatever sc.mode says. Every rank of a TP group makes the same calls
// with the same tokens (each caches its own heads).
class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;

  // Allocates the caches for `batch` sequences of up to `max_length` positions on the model's
  // device, forgetting any earlier ones. InvalidArgument for batch < 1, max_length outside
  // [1, max_position_embeddings] or a context on another device; ResourceExhausted when out of
  // memory; Unimplemented for a model whose blocks cannot decode.
  virtual absl::Status StartDecoding(const nn::StepContext& sc, int64_t batch,
                                     int64_t max_length) = 0;
  // tokens: contiguous i32 [B, n] (host or the model's device; B the started batch, n >= 1): the
  // next n tokens of every sequence, at positions decode_length() .. decode_length() + n - 1 (the
  // first call: the common prompt prefix; later: one token each). Each new position attends to
  // every earlier position and itself. Writes the logits of each row's LAST new position into
  // `logits` f32 [B, padded_vocab], or of every new position when it is [B * n, padded_vocab]
  // (row b * n + i: position i of sequence b); host or device; gathered across the TP ranks,
  // identical on each (padding columns included; they are not part of the vocabulary).
  // FailedPrecondition without StartDecoding; InvalidArgument for other shapes or dtypes, or
  // decode_length() + n > max_length (decoding goes on); OutOfRange for a token outside
  // [0, padded_vocab()). Errors other than those argument checks end decoding (StartDecoding
  // again).
  virtual absl::Status DecodeStep(const nn::StepContext& sc, const TensorView& tokens,
                                  const TensorView& logits) = 0;
  // Positions decoded per sequence so far (0 when not decoding).
  virtual int64_t decode_length() const = 0;
  // Frees the caches.
  virtual void StopDecoding() = 0;

  // ---- Slotted decoding (continuous batching; optional: the defaults say Unimplemented).
  // After StartDecoding(sc, S, max_length) the S sequences are independent slots, each with its
  // own length (slot_length), all empty at first. One DecodeSlots call runs the next tokens of
  // any set of slots (a prompt's tokens for a slot just reset, one token for a running one), in
  // one pass of the model; each sequence attends only to its own slot, and its logits do not
  // depend on the other slots of the step (batch invariance: the same bits as the slot decoded
  // alone). logits: f32 [R, padded_vocab], host or device, gathered across the TP ranks: R =
  // spans.size() for each span's LAST new position, or R = the total number of tokens for every
  // new position, span after span. FailedPrecondition without StartDecoding; InvalidArgument for
  // no spans, a slot out of range or given twice, no tokens, slot_length + tokens > max_length,
  // or logits of another shape; OutOfRange for a token outside [0, padded_vocab()). Errors other
  // than those argument checks end decoding.
  struct SlotTokens {
    int64_t slot = 0;
    absl::Span<const int32_t> tokens;
  };
  virtual absl::Status DecodeSlots(const nn::StepContext& sc, absl::Span<const SlotTokens> spans,
                                   const TensorView& logits) {
    (void)sc;
    (void)spans;
    (void)logits;
    return absl::UnimplementedError("this model has no slotted decoding");
  }
  // Empties a slot: its next tokens start at position 0. InvalidArgument for a slot out of range.
  virtual absl::Status ResetSlot(int64_t slot) {
    (void)slot;
    return absl::UnimplementedError("this model has no slotted decoding");
  }
  // Positions a slot holds (0 when not decoding).
  virtual int64_t slot_length(int64_t slot) const {
    (void)slot;
    return 0;
  }
};

// model.incremental_decoder(), or Unimplemented naming the architecture when it has none.
absl::StatusOr<IncrementalDecoder*> IncrementalDecoderOf(Model& model);

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_INCREMENTAL_DECODER_H_
