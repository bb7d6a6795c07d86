// TransformerStack's incremental decoding (nn/transformer.h): every block through its cache, the
// slots' lengths kept here.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/status.h"
#include "nn/transformer.h"  // IWYU pragma: associated

namespace mt {
namespace nn {

// ---------------------------------------------------------------- TransformerStack decoding

namespace {
// `s` with "layer i: " before its message.
absl::Status InLayer(int i, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("layer ", i, ": ", s.message()));
}
}  // namespace

absl::Status TransformerStack::StartDecoding(const StepContext& sc, int64_t batch,
                                             int64_t max_length) {
  StopDecoding();
  if (batch < 1 || max_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cannot decode ", batch, " sequences of up to ",
                                                   max_length, " positions (both must be >= 1)"));
  }
  for (int i = 0; i < num_layers(); ++i) {
    absl::Status s = layers_[i]->StartDecoding(sc, batch, max_length);
    if (!s.ok()) {
      StopDecoding();
      return InLayer(i, s);
    }
  }
  decode_batch_ = batch;
  decode_max_length_ = max_length;
  slot_lengths_.assign(batch, 0);
  return absl::OkStatus();
}

void TransformerStack::StopDecoding() {
  for (auto& l : layers_) l->StopDecoding();
  decode_batch_ = decode_max_length_ = 0;
  slot_lengths_.clear();
  decode_out_[0] = Tensor();
  decode_out_[1] = Tensor();
}

absl::Status TransformerStack::ResetSlot(int64_t slot) {
  if (slot < 0 || slot >= decode_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer stack: slot ", slot, " outside [0, ", decode_batch_, ")"));
  }
  for (int i = 0; i < num_layers(); ++i) {
    absl::Status s = layers_[i]->ResetSlot(slot);
    if (!s.ok()) return InLayer(i, s);
  }
  slot_lengths_[slot] = 0;
  return absl::OkStatus();
}

absl::StatusOr<TensorView> TransformerStack::DecodeForward(const StepContext& sc,
                                                           const TensorView& x) {
  if (decode_batch_ == 0) {
    return absl::FailedPreconditionError("transformer stack: DecodeForward before StartDecoding");
  }
  const bool same = std::all_of(slot_lengths_.begin(), slot_lengths_.end(),
                                [&](int64_t l) { return l == slot_lengths_[0]; });
  if (x.rank() != 3 || x.dim(0) != decode_batch_ || x.dim(1) < 1 || !same ||
      decode_length() + x.dim(1) > decode_max_length_) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer stack: decoding input ", x.DebugString(), " must be [",
                     decode_batch_, ", n, H] with n >= 1 and at most ",
                     decode_max_length_ - decode_length(), " more positions (", decode_length(),
                     " of ", decode_max_length_, " decoded; every slot at the same length)"));
  }
  std::vector<DecodeSpan> spans;
  for (int64_t b = 0; b < decode_batch_; ++b) spans.push_back(DecodeSpan{b, x.dim(1)});
  ASSIGN_OR_RETURN(TensorView out, RunDecode(sc, x, spans));
  return out.Reshape(x.shape);
}

absl::StatusOr<TensorView> TransformerStack::DecodeSlots(const StepContext& sc, const TensorView& x,
                                                         absl::Span<const DecodeSpan> spans) {
  if (decode_batch_ == 0) {
    return absl::FailedPreconditionError("transformer stack: DecodeSlots before StartDecoding");
  }
  std::vector<bool> seen(decode_batch_, false);
  int64_t rows = 0;
  for (const DecodeSpan& s : spans) {
    if (s.slot < 0 || s.slot >= decode_batch_ || seen[s.slot] || s.count < 1 ||
        slot_lengths_[s.slot] + s.count > decode_max_length_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transformer stack: span (slot ", s.slot, ", count ", s.count, ") needs a slot in [0, ",
          decode_batch_, ") given once and count >= 1 fitting the ", decode_max_length_,
          " positions"));
    }
    seen[s.slot] = true;
    rows += s.count;
  }
  if (spans.empty() || x.rank() != 2 || x.dim(0) != rows) {
    return absl::InvalidArgumentError(absl::StrCat("transformer stack: decoding input ",
                                                   x.DebugString(), " must be [", rows,
                                                   ", H] (the spans' rows), with >= 1 span"));
  }
  return RunDecode(sc, x, spans);
}

absl::StatusOr<TensorView> TransformerStack::RunDecode(const StepContext& sc, const TensorView& x,
                                                       absl::Span<const DecodeSpan> spans) {
  const Shape rows = {x.numel() / x.shape.back(), x.shape.back()};
  for (Tensor& t : decode_out_) {
    if (t.shape() != rows || t.dtype() != x.dtype || t.device() != sc.exec->device) {
      ASSIGN_OR_RETURN(t, Alloc(*sc.exec, rows, x.dtype));
    }
  }
  TensorView in = x;
  for (int i = 0; i < num_layers(); ++i) {
    const TensorView out = decode_out_[i % 2].view();
    absl::Status s = layers_[i]->DecodeSlots(sc, in, spans, out);
    if (!s.ok()) {
      StopDecoding();
      return InLayer(i, s);
    }
    in = out;
  }
  for (const DecodeSpan& s : spans) slot_lengths_[s.slot] += s.count;
  return in;
}

}  // namespace nn
}  // namespace mt
