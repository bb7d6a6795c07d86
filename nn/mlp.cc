#include "nn/mlp.h"

#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/ops/swiglu.h"
#include "core/status.h"

namespace mt {
namespace nn {
namespace {

absl::Status CheckFfn(const char* what, int64_t ffn, const ParameterStore& store) {
  if (ffn % store.tp_size() == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ffn hidden size ", ffn,
                                                 " is not divisible by the tensor-parallel size ",
                                                 store.tp_size()));
}

// (Re)allocates the [N, F] buffers in `ts` unless they already have that size on this device.
absl::Status EnsureBuffers(const StepContext& sc, int64_t N, int64_t F, DType dtype,
                           std::initializer_list<Tensor*> ts) {
  for (Tensor* t : ts) {
    if (t->numel() == N * F && t->device() == sc.exec->device) continue;
    ASSIGN_OR_RETURN(*t, Alloc(*sc.exec, {N, F}, dtype));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------- ParallelMLP

absl::StatusOr<ParallelMLP> ParallelMLP::Create(ParameterStore* store, const std::string& prefix,
                                                int64_t hidden, int64_t ffn, double init_std,
                                                double output_init_std, TpReduce reduce,
                                                ops::GeluForm gelu) {
  RETURN_IF_ERROR(CheckFfn("mlp", ffn, *store));
  ParallelMLP m;
  m.dtype_ = store->compute_dtype();
  m.reduce_ = reduce;
  m.gelu_ = gelu;
  ASSIGN_OR_RETURN(m.fc1_, ColumnParallelLinear::Create(store, prefix + ".fc1", hidden, ffn,
                                                        Bias::kYes, init_std));
  ASSIGN_OR_RETURN(m.fc2_, RowParallelLinear::Create(store, prefix + ".fc2", ffn, hidden,
                                                     Bias::kYes, output_init_std));
  return m;
}

absl::Status ParallelMLP::Forward(const StepContext& sc, const TensorView& x, const TensorView& y,
                                  const TensorView** deferred_bias) {
  const int64_t N = x.dim(0), F = fc1_.local_out();
  RETURN_IF_ERROR(EnsureBuffers(sc, N, F, dtype_, {&pre_, &act_}));
  x_ = x;
  if (gelu_ == ops::GeluForm::kTanh) {
    RETURN_IF_ERROR(fc1_.ForwardGelu(sc, x, pre_.view(), act_.view()));
  } else {
    RETURN_IF_ERROR(fc1_.Forward(sc, x, pre_.view()));
    RETURN_IF_ERROR(ops::Gelu(*sc.exec, pre_.view(), act_.view(), gelu_));
  }
  return fc2_.Forward(sc, act_.view(), y, deferred_bias, reduce_);
}

absl::Status ParallelMLP::Backward(const StepContext& sc, const TensorView& dy,
                                   const TensorView& dx) {
  if (pre_.numel() == 0) return absl::FailedPreconditionError("mlp: Backward without Forward");
  ASSIGN_OR_RETURN(Tensor dact, Alloc(*sc.exec, pre_.shape(), dtype_));
  RETURN_IF_ERROR(fc2_.Backward(sc, act_.view(), dy, dact.view()));
  RETURN_IF_ERROR(ops::GeluBackward(*sc.exec, pre_.view(), dact.view(), dact.view(), gelu_));
  RETURN_IF_ERROR(fc1_.BackwardLocal(sc, x_, dact.view(), dx, InputGrad::kOverwrite));
  return reduce_ == TpReduce::kYes ? FBackward(sc, dx) : absl::OkStatus();
}

void ParallelMLP::Release() {
  pre_ = Tensor();
  act_ = Tensor();
}

// ---------------------------------------------------------------- SwiGluMLP

absl::StatusOr<SwiGluMLP> SwiGluMLP::Create(ParameterStore* store, const std::string& prefix,
                                            int64_t hidden, int64_t ffn, double init_std,
                                            double output_init_std, TpReduce reduce) {
  RETURN_IF_ERROR(CheckFfn("swiglu mlp", ffn, *store));
  SwiGluMLP m;
  m.dtype_ = store->compute_dtype();
  m.reduce_ = reduce;
  ASSIGN_OR_RETURN(m.gate_, ColumnParallelLinear::Create(store, prefix + ".gate", hidden, ffn,
                                                         Bias::kNo, init_std));
  ASSIGN_OR_RETURN(
      m.up_, ColumnParallelLinear::Create(store, prefix + ".up", hidden, ffn, Bias::kNo, init_std));
  ASSIGN_OR_RETURN(m.down_, RowParallelLinear::Create(store, prefix + ".down", ffn, hidden,
                                                      Bias::kNo, output_init_std));
  return m;
}

absl::Status SwiGluMLP::Forward(const StepContext& sc, const TensorView& x, const TensorView& y,
                                const TensorView** deferred_bias) {
  const int64_t N = x.dim(0), F = gate_.local_out();
  RETURN_IF_ERROR(EnsureBuffers(sc, N, F, dtype_, {&gate_out_, &up_out_}));
  x_ = x;
  RETURN_IF_ERROR(gate_.Forward(sc, x, gate_out_.view()));
  RETURN_IF_ERROR(up_.Forward(sc, x, up_out_.view()));
  ASSIGN_OR_RETURN(Tensor act, Alloc(*sc.exec, {N, F}, dtype_));
  RETURN_IF_ERROR(ops::SwiGlu(*sc.exec, gate_out_.view(), up_out_.view(), act.view()));
  return down_.Forward(sc, act.view(), y, deferred_bias, reduce_);
}

absl::Status SwiGluMLP::Backward(const StepContext& sc, const TensorView& dy,
                                 const TensorView& dx) {
  if (gate_out_.numel() == 0) {
    return absl::FailedPreconditionError("swiglu mlp: Backward without Forward");
  }
  const ExecContext& ec = *sc.exec;
  const Shape& shape = gate_out_.shape();  // [N, F / tp]
  ASSIGN_OR_RETURN(Tensor act, Alloc(ec, shape, dtype_));
  RETURN_IF_ERROR(ops::SwiGlu(ec, gate_out_.view(), up_out_.view(), act.view()));
  ASSIGN_OR_RETURN(Tensor dact, Alloc(ec, shape, dtype_));
  RETURN_IF_ERROR(down_.Backward(sc, act.view(), dy, dact.view()));
  // dgate over dact; dup over act (no longer needed).
  RETURN_IF_ERROR(ops::SwiGluBackward(ec, gate_out_.view(), up_out_.view(), dact.view(),
                                      dact.view(), act.view()));
  // dx = dgate W_gate^T + dup W_up^T on this rank's columns, then one f all-reduce.
  RETURN_IF_ERROR(gate_.BackwardLocal(sc, x_, dact.view(), dx, InputGrad::kOverwrite));
  RETURN_IF_ERROR(up_.BackwardLocal(sc, x_, act.view(), dx, InputGrad::kAccumulate));
  return reduce_ == TpReduce::kYes ? FBackward(sc, dx) : absl::OkStatus();
}

void SwiGluMLP::Release() {
  gate_out_ = Tensor();
  up_out_ = Tensor();
}

}  // namespace nn
}  // namespace mt
