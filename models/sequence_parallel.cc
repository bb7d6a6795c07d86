#include "models/sequence_parallel.h"

#include "absl/strings/str_cat.h"
#include "comm/sequence_parallel.h"
#include "core/alloc.h"
#include "core/status.h"
#include "nn/context_parallel.h"

namespace mt {
namespace models {

SequenceParallelEnds::SequenceParallelEnds(nn::ParameterStore* store, nn::Norm* norm,
                                           int norm_first, int norm_end)
    : store_(store), norm_(norm) {
  norm_grads_.Add(norm_first, norm_end);
}

absl::StatusOr<TensorView> SequenceParallelEnds::As3D(const TensorView& t) const {
  return t.Reshape({B_, t.numel() / (B_ * H_), H_});
}

absl::Status SequenceParallelEnds::Ensure(const nn::StepContext& sc, Tensor* t, const Shape& shape,
                                          DType dtype) const {
  if (t->shape() == shape && t->dtype() == dtype && t->device() == sc.exec->device) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*t, Alloc(*sc.exec, shape, dtype));
  return absl::OkStatus();
}

absl::StatusOr<TensorView> SequenceParallelEnds::Enter(const nn::StepContext& sc,
                                                       const TensorView& emb,
                                                       const ops::DropoutArgs& dropout) {
  if (sc.tp == nullptr || emb.rank() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence parallelism: needs a TP communicator and embeddings [B, T, H], got ",
                     emb.DebugString()));
  }
  const int n = sc.tp_size();
  const int64_t T = emb.dim(1);
  B_ = emb.dim(0);
  H_ = emb.dim(2);
  if (T % n != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence parallelism: the sequence length ", T,
                                                   " is not divisible by the ", n,
                                                   " tensor-parallel ranks"));
  }
  RETURN_IF_ERROR(Ensure(sc, &local_in_, {B_, T / n, H_}, emb.dtype));
  RETURN_IF_ERROR(comm::ScatterToSequenceParallelRegionForward(*sc.tp, emb, local_in_.view()));
  RETURN_IF_ERROR(DropSlice(sc, local_in_.view(), dropout, T, /*backward=*/false));
  return local_in_.view();
}

absl::Status SequenceParallelEnds::DropSlice(const nn::StepContext& sc, const TensorView& x_local,
                                             const ops::DropoutArgs& dropout, int64_t T,
                                             bool backward) const {
  const auto drop = backward ? ops::DropoutBackward : ops::Dropout;
  if (sc.cp_size() == 1) {
    return drop(*sc.exec, x_local, nn::SliceDropout(sc, dropout, T, H_), x_local);
  }
  for (int h = 0; h < 2; ++h) {  // Context parallel: this TP rank's slice of each chunk.
    const TensorView half = nn::CpHalf(x_local, h);
    RETURN_IF_ERROR(
        drop(*sc.exec, half, nn::CpChunkDropout(sc, dropout, T, H_, h, sc.tp_rank()), half));
  }
  return absl::OkStatus();
}

absl::Status SequenceParallelEnds::EnterBackward(const nn::StepContext& sc,
                                                 const TensorView& dx_local,
                                                 const ops::DropoutArgs& dropout,
                                                 const TensorView& demb) {
  ASSIGN_OR_RETURN(TensorView demb3, As3D(demb));
  RETURN_IF_ERROR(DropSlice(sc, dx_local, dropout, demb3.dim(1), /*backward=*/true));
  return comm::ScatterToSequenceParallelRegionBackward(*sc.tp, dx_local, demb3);
}

absl::Status SequenceParallelEnds::Exit(const nn::StepContext& sc, const TensorView& h_local,
                                        const TensorView& out) {
  // A pipeline stage's last layers come without Enter on this stage: the sizes from the slice.
  if (h_local.rank() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("sequence parallelism: the stack's output ",
                                                   h_local.DebugString(),
                                                   " is not [B, T / tp, H]"));
  }
  B_ = h_local.dim(0);
  H_ = h_local.dim(2);
  ASSIGN_OR_RETURN(TensorView out3, As3D(out));
  TensorView normed = h_local;
  if (norm_ != nullptr) {
    RETURN_IF_ERROR(Ensure(sc, &normed_, h_local.shape, h_local.dtype));
    ASSIGN_OR_RETURN(TensorView h2, h_local.Reshape({h_local.numel() / H_, H_}));
    ASSIGN_OR_RETURN(TensorView n2, normed_.view().Reshape({h_local.numel() / H_, H_}));
    RETURN_IF_ERROR(norm_->Forward(sc, h2, n2));
    normed = normed_.view();
  }
  return comm::GatherFromSequenceParallelRegionForward(*sc.tp, normed, out3);
}

absl::Status SequenceParallelEnds::ExitBackward(const nn::StepContext& sc, const TensorView& dout,
                                                const TensorView& dh_local) {
  ASSIGN_OR_RETURN(TensorView dout3, As3D(dout));
  // dout is complete on every rank: the gradient of this rank's slice is the slice.
  if (norm_ == nullptr) {
    return comm::ScatterToSequenceParallelRegionForward(*sc.tp, dout3, dh_local);
  }
  ASSIGN_OR_RETURN(Tensor dnormed, Alloc(*sc.exec, dh_local.shape, dh_local.dtype));
  RETURN_IF_ERROR(comm::ScatterToSequenceParallelRegionForward(*sc.tp, dout3, dnormed.view()));
  const Shape rows = {dh_local.numel() / H_, H_};
  ASSIGN_OR_RETURN(TensorView dn2, dnormed.view().Reshape(rows));
  ASSIGN_OR_RETURN(TensorView dh2, dh_local.Reshape(rows));
  RETURN_IF_ERROR(norm_grads_.Begin(sc, *store_));
  RETURN_IF_ERROR(norm_->Backward(sc, dn2, dh2));
  return norm_grads_.End(sc, *store_);
}

}  // namespace models
}  // namespace mt
