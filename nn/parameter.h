// Parameters with tensor-parallel partition metadata, and the store that owns them.
//
// Every parameter is declared by a ParamSpec holding its GLOBAL (serial-model) shape and which
// dimension is split across the tensor-parallel ranks (or none). A rank holds the contiguous slice
// [tp_rank * n / tp, (tp_rank + 1) * n / tp) of the split dimension. Initial values are a pure
// function of (seed, the parameter's name, the GLOBAL element index), so a TP-sharded model built
// from a seed holds exactly the slices of the serial model built from the same seed.
//
// ParameterStore allocates all values in one f32 buffer and all gradients in another (so that
// data-parallel all-reduce and checkpointing see one contiguous region each). Modules declare their
// parameters with Add() at construction; Allocate() then creates the buffers; only after it may
// value()/grad() be used.
//
// Mixed precision (Megatron's fp32 master weights): the store has a compute dtype (f32, bf16 or
// f16). value() is always the f32 MASTER weight, which the optimizer updates and checkpoints save;
// compute_value() is the copy that modules read in Forward/Backward, in the compute dtype. With an
// f32 compute dtype it IS value() (same memory, no copy); otherwise it lives in a third flat buffer
// that RefreshComputeWeights() fills by rounding the masters (nearest even). Allocate() refreshes
// once; whoever changes the masters afterwards (the optimizer after every applied step, checkpoint
// loading, tests) must refresh again. Gradients stay f32 ("main grads") whatever the compute dtype:
// modules accumulate their compute-dtype backward products into them in f32.
//
// Sharded masters: with a bf16/f16 compute dtype, the distributed optimizer keeps each data-
// parallel rank's shard of the f32 masters itself (train/distributed_optimizer.h) and calls
// ReleaseMasters(), which frees the whole f32 master buffer. The store then keeps f32 masters only
// of the parameters declared f32_compute (a compact buffer, updated by that optimizer), and
// value()/flat_values() of any other parameter CHECK-fail; the compute copies are the whole
// weights, set by the optimizer after each step (SetComputeWeightsFromHost when loading).
//
// Mirrors: a second instance of modules already declared in a store (a pipeline chunk that keeps
// another micro-batch's activations, train/pipeline_schedule.h) declares its parameters in a
// Mirror() of that store: each Add repeats the owner's declaration at the next handle and gets
// that handle, so both instances read the same values and accumulate into the same gradients.
//
// Devices: the store lives on the device given at construction (the CPU by default): values,
// gradients and compute copies are all on it, and the modules using the store must run with an
// ExecContext whose `device` is the same (nn/ and models/ allocate on ExecContext::device). On a
// GPU, Allocate() computes the initial values on the host exactly as on the CPU (bit-identical
// masters) and uploads them. Views from value()/grad()/flat_*() then point to device memory: the
// host must not dereference them; use the Copy*Host() helpers (checkpoints, tests) or
// core/alloc.h.
#ifndef MT_NN_PARAMETER_H_
#define MT_NN_PARAMETER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace nn {

enum class Init { kNormal, kZeros, kOnes };

struct ParamSpec {
  std::string name;    // Unique, dotted: "layers.3.attention.qkv.weight".
  Shape global_shape;  // Shape in the serial model.
  int split_dim = -1;  // Dimension split across TP ranks; -1 = replicated on every TP rank.
  Init init = Init::kNormal;
  double init_std = 0.02;    // For Init::kNormal.
  bool weight_decay = true;  // False for biases and LayerNorm parameters.
  // Dimension 0 is the vocabulary padded for the TP degree (its size changes with TP; rows past the
  // real vocabulary are never used). Checkpoint resharding re-pads such tensors. Every parameter
  // whose shape follows the padded vocabulary must say so: models::CreateModel refuses a model
  // with one that does not (or with a declared one whose dimension 0 is not the vocabulary).
  bool vocab_padded = false;
  // Modules read this parameter's f32 master, value(), in Forward/Backward instead of its compute
  // copy (LayerNorm/RMSNorm gains and biases, the MLM output bias): when a distributed optimizer
  // shards the masters (ReleaseMasters), the store keeps these whole on every rank.
  bool f32_compute = false;
  // Held only by the expert-parallel rank that runs it (a mixture of experts' expert,
  // models/variants/moe): the optimizer reduces its gradient over the expert-data-parallel group
  // and sums its norm over the expert-parallel group (train/optimizer.h). Set by
  // ParameterStore::MarkExpert.
  bool expert = false;
};

// Whether `a` and `b` declare the same parameter: name, global shape, split dimension and
// vocabulary padding (the initialisation and weight decay aside).
bool SameDeclaration(const ParamSpec& a, const ParamSpec& b);

// The local shape of `spec` on one of `tp_size` ranks; InvalidArgument if the split dimension is
// not divisible by tp_size.
absl::StatusOr<Shape> LocalShape(const ParamSpec& spec, int tp_size);

// Fills `local` (f32, this rank's slice, contiguous CPU) with the spec's initial values.
// Normal values come from Philox keyed by (seed, hash of the name, global element index) through
// a Box-Muller transform; they do not depend on tp_size.
absl::Status InitializeSlice(const ParamSpec& spec, int tp_rank, int tp_size, uint64_t seed,
                             const TensorView& local);

// A stable 64-bit hash of a parameter name (FNV-1a), used as the RNG stream of its values.
uint64_t NameHash(const std::string& name);

class ParameterStore {
 public:
  // compute_dtype must be f32, bf16 or f16 (CHECK-fails otherwise: validate user input first, e.g.
  // with IsFloating()). `device`: where the buffers live (see the file comment).
  ParameterStore(int tp_rank, int tp_size, DType compute_dtype = DType::kF32,
                 Device device = Device::Cpu());
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  // A store over `owner`'s buffers for modules declared in `owner` from handle `first` on (see
  // the file comment). The owner must be allocated and outlive the mirror. Everything but Add
  // reads or changes the owner's values, gradients and compute copies; Allocate() is refused.
  // A mirror is for modules only: its size() is its next handle, while NumLocalElements(),
  // Find(), spec() and the flat buffers cover all the owner's parameters, so give the optimizer,
  // the gradient reducer and checkpoints the owner. InvalidArgument for an unallocated owner or a
  // `first` outside [0, the owner's parameter count].
  static absl::StatusOr<std::unique_ptr<ParameterStore>> Mirror(ParameterStore* owner, int first);
  bool is_mirror() const { return owner_ != nullptr; }

  // Declares a parameter; returns its handle. InvalidArgument for a duplicate name or an
  // indivisible split. Only before Allocate(). In a mirror: InvalidArgument unless `spec` has the
  // name, global shape, split dimension and vocabulary padding of the owner's parameter at the
  // next handle (see Mirror()).
  absl::StatusOr<int> Add(const ParamSpec& spec);
  // Marks parameter `handle` an expert-parallel one (ParamSpec::expert). Only before Allocate();
  // a no-op in a mirror (the owner's declaration counts).
  void MarkExpert(int handle);
  // Whether any parameter is an expert-parallel one.
  bool has_experts() const;
  // Allocates values and gradients (zeroed) and initialises every value from `seed`; then the
  // compute copies (RefreshComputeWeights on the calling thread). On a GPU the values are
  // initialised on the host and uploaded, and the device is synchronized before returning.
  // Errors: ResourceExhausted when the device is out of memory; Unimplemented/Internal for CUDA
  // failures (no GPU, CPU-only build); FailedPrecondition for a mirror.
  absl::Status Allocate(uint64_t seed);
  // Rounds every f32 master value to its compute-dtype copy (a no-op for f32 compute). Call after
  // changing the masters. Errors: those of ops::Convert (none for an allocated store);
  // FailedPrecondition after ReleaseMasters() (the sharded masters' owner sets the copies).
  absl::Status RefreshComputeWeights(const ExecContext& ctx);

  // Frees the whole f32 master buffer, keeping (in a compact buffer, values unchanged) only the
  // masters of f32_compute parameters (see the file comment). For the optimizer that then holds
  // the sharded masters. FailedPrecondition for a mirror, an f32 compute dtype, an unallocated
  // store or one already released; allocation errors as core/alloc.h.
  absl::Status ReleaseMasters(const ExecContext& ctx);
  // Whether every f32 master is held here (false after ReleaseMasters()).
  bool masters_whole() const { return !buffers().masters_released_; }
  // After ReleaseMasters(): the kept f32 masters, one compact f32 buffer in handle order (the
  // f32_compute parameters' value() views point into it); empty before.
  TensorView flat_kept_values() const { return buffers().kept_buffer_.view(); }
  // After ReleaseMasters(): sets every compute copy by rounding `host_values` (f32
  // [NumLocalElements()] on the host, flat layout) and the kept f32 masters to their values. The
  // caller (the owner of the sharded masters) updates its shard itself. FailedPrecondition while
  // the masters are whole (use CopyValuesFromHost), InvalidArgument for another shape/dtype/device.
  absl::Status SetComputeWeightsFromHost(const ExecContext& ctx, const TensorView& host_values);

  // Parameters declared (in a mirror: the handle its next Add gets).
  int size() const { return owner_ != nullptr ? next_ : static_cast<int>(specs_.size()); }
  const ParamSpec& spec(int handle) const { return specs_[handle]; }
  // The f32 master weight. After ReleaseMasters() only for f32_compute parameters (CHECK).
  const TensorView& value(int handle) const;
  // This rank's shape of a parameter (valid whether or not its master is held here).
  const Shape& local_shape(int handle) const { return local_shapes_[handle]; }
  // The weight in the compute dtype, as of the last refresh (value(handle) itself for f32).
  const TensorView& compute_value(int handle) const {
    return compute_dtype_ == DType::kF32 ? buffers().values_[handle]
                                         : buffers().compute_values_[handle];
  }
  // The f32 gradient.
  const TensorView& grad(int handle) const { return buffers().grads_[handle]; }
  // All values / all gradients as one flat f32 tensor [NumLocalElements()]; all compute copies as
  // one flat tensor of the compute dtype (flat_values() for f32). flat_values() CHECK-fails after
  // ReleaseMasters().
  TensorView flat_values() const;
  TensorView flat_grads() const { return buffers().grad_buffer_.view(); }
  TensorView flat_compute_values() const {
    return compute_dtype_ == DType::kF32 ? flat_values() : buffers().compute_buffer_.view();
  }
  DType compute_dtype() const { return compute_dtype_; }
  // Handle of a name, or NotFound.
  absl::StatusOr<int> Find(const std::string& name) const;

  // Elements held by this rank / in the serial model.
  int64_t NumLocalElements() const;
  int64_t NumGlobalElements() const;
  // Sets every gradient to zero (start of a step: backward passes accumulate), on ctx's stream
  // for a GPU store. Errors: those of ops::Fill (CUDA failures).
  absl::Status ZeroGrads(const ExecContext& ctx);
  // The same for a CPU store (CHECK-fails on a GPU store: use ZeroGrads(ctx)).
  void ZeroGrads();

  // Host <-> device copies of the flat buffers, in the flat layout (parameter `handle` occupies
  // [offset(handle), offset(handle) + value(handle).numel()) of each), for checkpoints and tests.
  // They work on CPU stores too (then they are plain copies). All synchronous.
  // f32 [NumLocalElements()] host copies of all master values / all gradients
  // (CopyValuesToHost: FailedPrecondition after ReleaseMasters()).
  absl::StatusOr<Tensor> CopyValuesToHost(const ExecContext& ctx) const;
  absl::StatusOr<Tensor> CopyGradsToHost(const ExecContext& ctx) const;
  // Overwrites every master value with `host_values` (f32 [NumLocalElements()] on the host, flat
  // layout), then refreshes the compute copies. InvalidArgument for another shape/dtype/device;
  // FailedPrecondition after ReleaseMasters().
  absl::Status CopyValuesFromHost(const ExecContext& ctx, const TensorView& host_values);
  // OK when `host_values` can hold this store's flat layout in host memory (contiguous f32
  // [NumLocalElements()]); else InvalidArgument "<caller>: host_values ... must be ...".
  absl::Status CheckHostFlat(absl::string_view caller, const TensorView& host_values) const;
  // Element offset of a parameter in the flat buffers.
  int64_t offset(int handle) const { return offsets_[handle]; }
  // Where the buffers live.
  Device device() const { return device_; }

  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }

 private:
  // The store whose buffers these are: the owner for a mirror.
  const ParameterStore& buffers() const { return owner_ != nullptr ? *owner_ : *this; }
  absl::Status ReleasedError(const char* call) const;

  int tp_rank_, tp_size_;
  DType compute_dtype_;
  Device device_;
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;
  std::vector<Shape> local_shapes_;
  std::vector<TensorView> values_, grads_, compute_values_;  // compute_values_: non-f32 only.
  Tensor value_buffer_, grad_buffer_, compute_buffer_;
  bool allocated_ = false;
  bool masters_released_ = false;
  Tensor kept_buffer_;               // After ReleaseMasters(): the f32_compute parameters' masters.
  ParameterStore* owner_ = nullptr;  // Set for a mirror,
  int next_ = 0;                     // whose next Add gets this handle.
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_PARAMETER_H_
