#include "nn/sequence_parallel.h"

#include "core/alloc.h"
#include "core/status.h"

namespace mt {
namespace nn {

ops::DropoutArgs SliceDropout(const StepContext& sc, const ops::DropoutArgs& full, int64_t T,
                              int64_t H) {
  const int n = sc.tp_size();
  if (n == 1) return full;
  ops::DropoutArgs d = full;
  const int64_t slice = (T / n) * H;  // Elements of one sample's slice.
  d.key_inner = slice;
  d.key_outer_stride = T * H;
  d.key_base = full.key_base + sc.tp_rank() * slice;
  return d;
}

void SequenceParallelGrads::Add(int first, int end) {
  for (int h = first; h < end; ++h) handles_.push_back(h);
}

absl::Status SequenceParallelGrads::Pack(const StepContext& sc, const ParameterStore& store,
                                         const Tensor& flat, bool to_flat) const {
  int64_t offset = 0;
  for (int h : handles_) {
    const TensorView& g = store.grad(h);
    const TensorView part(static_cast<char*>(flat.data()) + offset * sizeof(float), g.shape,
                          DType::kF32, flat.device());
    RETURN_IF_ERROR(to_flat ? CopyTensor(*sc.exec, g, part) : CopyTensor(*sc.exec, part, g));
    offset += g.numel();
  }
  return absl::OkStatus();
}

absl::Status SequenceParallelGrads::Begin(const StepContext& sc, const ParameterStore& store) {
  if (handles_.empty()) return absl::OkStatus();
  int64_t n = 0;
  for (int h : handles_) n += store.grad(h).numel();
  if (saved_.numel() != n || saved_.device() != sc.exec->device) {
    ASSIGN_OR_RETURN(saved_, Alloc(*sc.exec, {n}, DType::kF32));
    ASSIGN_OR_RETURN(summed_, Alloc(*sc.exec, {n}, DType::kF32));
  }
  RETURN_IF_ERROR(Pack(sc, store, saved_, /*to_flat=*/true));
  for (int h : handles_) RETURN_IF_ERROR(SetZero(*sc.exec, store.grad(h)));
  return absl::OkStatus();
}

absl::Status SequenceParallelGrads::End(const StepContext& sc, const ParameterStore& store) {
  if (handles_.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(Pack(sc, store, summed_, /*to_flat=*/true));
  if (sc.tp != nullptr) RETURN_IF_ERROR(sc.tp->AllReduce(summed_.view(), comm::ReduceOp::kSum));
  // grads = saved + summed, through the flat buffers.
  RETURN_IF_ERROR(ops::Add(*sc.exec, saved_.view(), summed_.view(), summed_.view()));
  return Pack(sc, store, summed_, /*to_flat=*/false);
}

absl::Status GatherBuffers::Ensure(const ExecContext& ec, const Shape& shape, DType dtype) {
  for (Tensor* t : {&input, &full_a, &full_b}) {
    if (t->shape() == shape && t->dtype() == dtype && t->device() == ec.device) continue;
    ASSIGN_OR_RETURN(*t, Alloc(ec, shape, dtype));
  }
  return absl::OkStatus();
}

}  // namespace nn
}  // namespace mt
