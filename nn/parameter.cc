#include "nn/parameter.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/philox.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace nn {

absl::StatusOr<Shape> LocalShape(const ParamSpec& spec, int tp_size) {
  Shape shape = spec.global_shape;
  if (spec.split_dim < 0) return shape;
  if (spec.split_dim >= static_cast<int>(shape.size())) {
    return absl::InvalidArgumentError(absl::StrCat("parameter ", spec.name, ": split_dim ",
                                                   spec.split_dim, " out of range for shape ",
                                                   ShapeToString(shape)));
  }
  if (tp_size < 1 || shape[spec.split_dim] % tp_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter ", spec.name, " ", ShapeToString(shape), ": dimension ",
                     spec.split_dim, " is not divisible by the tensor-parallel size ", tp_size));
  }
  shape[spec.split_dim] /= tp_size;
  return shape;
}

uint64_t NameHash(const std::string& name) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

absl::Status InitializeSlice(const ParamSpec& spec, int tp_rank, int tp_size, uint64_t seed,
                             const TensorView& local) {
  ASSIGN_OR_RETURN(Shape local_shape, LocalShape(spec, tp_size));
  if (local.shape != local_shape || local.dtype != DType::kF32 || !InHostMemory(local) ||
      !local.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("InitializeSlice: ", spec.name, " expects f32",
                                                   ShapeToString(local_shape), " on cpu, got ",
                                                   local.DebugString()));
  }
  float* out = local.data_as<float>();
  const int64_t n = local.numel();
  if (spec.init == Init::kZeros || spec.init == Init::kOnes) {
    const float v = spec.init == Init::kOnes ? 1.0f : 0.0f;
    for (int64_t i = 0; i < n; ++i) out[i] = v;
    return absl::OkStatus();
  }
  // Map each local element to its global row-major index: the split dimension is offset by
  // tp_rank * local extent; every other dimension is unchanged.
  const Shape& g = spec.global_shape;
  const int rank = static_cast<int>(g.size());
  const int sd = spec.split_dim;
  int64_t inner = 1;  // Elements after the split dimension (global == local there).
  for (int d = sd + 1; d < rank && sd >= 0; ++d) inner *= g[d];
  const int64_t local_extent = sd >= 0 ? local_shape[sd] : 0;
  const int64_t global_extent = sd >= 0 ? g[sd] : 0;
  const uint64_t stream = NameHash(spec.name);
  for (int64_t i = 0; i < n; ++i) {
    int64_t gi = i;
    if (sd >= 0) {
      const int64_t outer = i / (local_extent * inner);
      const int64_t mid = (i / inner) % local_extent;
      const int64_t in = i % inner;
      gi = (outer * global_extent + tp_rank * local_extent + mid) * inner + in;
    }
    // Box-Muller on two independent uniforms of this element; u1 in (0, 1].
    const double u1 = 1.0 - PhiloxUniform(seed, stream, 2 * static_cast<uint64_t>(gi));
    const double u2 = PhiloxUniform(seed, stream, 2 * static_cast<uint64_t>(gi) + 1);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    out[i] = static_cast<float>(spec.init_std * z);
  }
  return absl::OkStatus();
}

ParameterStore::ParameterStore(int tp_rank, int tp_size, DType compute_dtype, Device device)
    : tp_rank_(tp_rank), tp_size_(tp_size), compute_dtype_(compute_dtype), device_(device) {
  CHECK(IsFloating(compute_dtype))
      << "ParameterStore: compute dtype " << DTypeName(compute_dtype) << " is not f32, bf16 or f16";
}

bool SameDeclaration(const ParamSpec& a, const ParamSpec& b) {
  return a.name == b.name && a.global_shape == b.global_shape && a.split_dim == b.split_dim &&
         a.vocab_padded == b.vocab_padded;
}

absl::StatusOr<std::unique_ptr<ParameterStore>> ParameterStore::Mirror(ParameterStore* owner,
                                                                       int first) {
  if (owner == nullptr || !owner->allocated_ || first < 0 ||
      first > static_cast<int>(owner->specs_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ParameterStore::Mirror: needs an allocated store and a first handle in [0, its size]; "
        "got ",
        owner == nullptr ? "no store" : (owner->allocated_ ? "a store" : "an unallocated store"),
        " and handle ", first));
  }
  std::unique_ptr<ParameterStore> m(
      new ParameterStore(owner->tp_rank_, owner->tp_size_, owner->compute_dtype_, owner->device_));
  m->specs_ = owner->specs_;
  m->offsets_ = owner->offsets_;
  m->local_shapes_ = owner->local_shapes_;
  m->values_ = owner->values_;
  m->grads_ = owner->grads_;
  m->compute_values_ = owner->compute_values_;
  m->allocated_ = true;
  m->owner_ = owner->owner_ != nullptr ? owner->owner_ : owner;
  m->next_ = first;
  return m;
}

absl::StatusOr<int> ParameterStore::Add(const ParamSpec& spec) {
  if (owner_ != nullptr) {
    if (next_ >= static_cast<int>(specs_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("mirror parameter store: ", spec.name,
                                                     " is declared past the owner's ",
                                                     specs_.size(), " parameters"));
    }
    const ParamSpec& want = specs_[next_];
    if (!SameDeclaration(spec, want)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mirror parameter store: handle ", next_, " is declared as ", spec.name,
          ShapeToString(spec.global_shape), " split ", spec.split_dim, " but the owner has ",
          want.name, ShapeToString(want.global_shape), " split ", want.split_dim));
    }
    return next_++;
  }
  CHECK(!allocated_) << "ParameterStore::Add after Allocate";
  for (const ParamSpec& s : specs_) {
    if (s.name == spec.name) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate parameter name ", spec.name));
    }
  }
  ASSIGN_OR_RETURN(Shape local, LocalShape(spec, tp_size_));
  offsets_.push_back(NumLocalElements());
  specs_.push_back(spec);
  local_shapes_.push_back(std::move(local));
  return static_cast<int>(specs_.size()) - 1;
}

void ParameterStore::MarkExpert(int handle) {
  if (owner_ != nullptr) return;
  CHECK(!allocated_) << "ParameterStore::MarkExpert after Allocate";
  CHECK(handle >= 0 && handle < size()) << "ParameterStore::MarkExpert: no handle " << handle;
  specs_[handle].expert = true;
}

bool ParameterStore::has_experts() const {
  for (const ParamSpec& s : buffers().specs_) {
    if (s.expert) return true;
  }
  return false;
}

absl::Status ParameterStore::Allocate(uint64_t seed) {
  if (owner_ != nullptr) {
    return absl::FailedPreconditionError(
        "ParameterStore::Allocate on a mirror (its buffers are its owner's)");
  }
  CHECK(!allocated_) << "ParameterStore::Allocate twice";
  ExecContext ctx;  // The default stream; synchronized below.
  ctx.device = device_;
  const int64_t total = NumLocalElements();
  // Initial values computed on the host (the same bits on every device): in place, or staged and
  // uploaded for a store elsewhere. The slices cover the buffer.
  ASSIGN_OR_RETURN(value_buffer_, Alloc(ctx, {total}, DType::kF32));
  HostStaging staging;
  ASSIGN_OR_RETURN(const TensorView host_values, staging.ForWriting(value_buffer_.view()));
  for (size_t i = 0; i < specs_.size(); ++i) {
    const TensorView local(host_values.data_as<float>() + offsets_[i], local_shapes_[i],
                           DType::kF32);
    RETURN_IF_ERROR(InitializeSlice(specs_[i], tp_rank_, tp_size_, seed, local));
  }
  RETURN_IF_ERROR(CopyTensor(ctx, host_values, value_buffer_.view()));
  ASSIGN_OR_RETURN(grad_buffer_, AllocZeros(ctx, {total}, DType::kF32));
  const bool copies = compute_dtype_ != DType::kF32;
  if (copies) {
    ASSIGN_OR_RETURN(compute_buffer_, AllocZeros(ctx, {total}, compute_dtype_));
  }
  const size_t compute_size = DTypeSize(compute_dtype_);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const int64_t offset = offsets_[i];
    values_.emplace_back(value_buffer_.data_as<float>() + offset, local_shapes_[i], DType::kF32,
                         device_);
    grads_.emplace_back(grad_buffer_.data_as<float>() + offset, local_shapes_[i], DType::kF32,
                        device_);
    if (copies) {
      compute_values_.emplace_back(
          static_cast<char*>(compute_buffer_.data()) + offset * compute_size, local_shapes_[i],
          compute_dtype_, device_);
    }
  }
  allocated_ = true;
  RETURN_IF_ERROR(RefreshComputeWeights(ctx));
  return SynchronizeDevice(ctx);
}

absl::Status ParameterStore::RefreshComputeWeights(const ExecContext& ctx) {
  CHECK(allocated_) << "ParameterStore::RefreshComputeWeights before Allocate";
  if (owner_ != nullptr) return owner_->RefreshComputeWeights(ctx);
  if (compute_dtype_ == DType::kF32) return absl::OkStatus();
  if (masters_released_) return ReleasedError("RefreshComputeWeights");
  return ops::Convert(ctx, value_buffer_.view(), compute_buffer_.view());
}

const TensorView& ParameterStore::value(int handle) const {
  const TensorView& v = buffers().values_[handle];
  CHECK(v.data != nullptr || v.numel() == 0)
      << "ParameterStore::value: the f32 master of " << specs_[handle].name
      << " is sharded by the distributed optimizer; modules read compute_value(), or declare the "
         "parameter f32_compute";
  return v;
}

TensorView ParameterStore::flat_values() const {
  CHECK(!buffers().masters_released_)
      << "ParameterStore::flat_values: the f32 masters are sharded by the distributed optimizer";
  return buffers().value_buffer_.view();
}

absl::Status ParameterStore::ReleasedError(const char* call) const {
  return absl::FailedPreconditionError(
      absl::StrCat("ParameterStore::", call,
                   ": the f32 masters are sharded by the distributed optimizer (read or set them "
                   "through train::Optimizer)"));
}

absl::Status ParameterStore::ReleaseMasters(const ExecContext& ctx) {
  if (owner_ != nullptr || !allocated_ || masters_released_ || compute_dtype_ == DType::kF32) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ParameterStore::ReleaseMasters needs an allocated store (not a mirror) with a bf16/f16 "
        "compute dtype whose masters are whole; this one is ",
        owner_ != nullptr ? "a mirror" : (!allocated_ ? "unallocated" : ""),
        masters_released_ ? "already released" : "", " with compute dtype ",
        DTypeName(compute_dtype_)));
  }
  int64_t kept = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].f32_compute) kept += NumElements(local_shapes_[i]);
  }
  // The new views are swapped in only once every copy has succeeded: a failure leaves the store
  // as it was.
  ASSIGN_OR_RETURN(Tensor kept_buffer, Alloc(ctx, {kept}, DType::kF32));
  std::vector<TensorView> values;
  int64_t at = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    float* data = nullptr;
    if (specs_[i].f32_compute) {
      data = kept_buffer.data_as<float>() + at;
      const TensorView kept_view(data, local_shapes_[i], DType::kF32, device_);
      RETURN_IF_ERROR(CopyTensor(ctx, values_[i], kept_view));
      at += kept_view.numel();
    }
    values.emplace_back(data, local_shapes_[i], DType::kF32, device_);
  }
  RETURN_IF_ERROR(SynchronizeDevice(ctx));
  kept_buffer_ = std::move(kept_buffer);
  values_ = std::move(values);
  value_buffer_ = Tensor();
  masters_released_ = true;
  return absl::OkStatus();
}

absl::Status ParameterStore::SetComputeWeightsFromHost(const ExecContext& ctx,
                                                       const TensorView& host_values) {
  CHECK(allocated_) << "ParameterStore::SetComputeWeightsFromHost before Allocate";
  if (owner_ != nullptr) return owner_->SetComputeWeightsFromHost(ctx, host_values);
  if (!masters_released_) {
    return absl::FailedPreconditionError(
        "ParameterStore::SetComputeWeightsFromHost: the masters are whole; use "
        "CopyValuesFromHost");
  }
  RETURN_IF_ERROR(CheckHostFlat("ParameterStore::SetComputeWeightsFromHost", host_values));
  // Rounded on the host (the same round-to-nearest-even as on a device), then uploaded.
  HostStaging staging;
  ASSIGN_OR_RETURN(const TensorView host_copies, staging.ForWriting(compute_buffer_.view()));
  RETURN_IF_ERROR(ops::Convert(ExecContext(), host_values, host_copies));
  RETURN_IF_ERROR(CopyTensor(ctx, host_copies, compute_buffer_.view()));
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!specs_[i].f32_compute) continue;
    const TensorView from(host_values.data_as<float>() + offsets_[i], local_shapes_[i],
                          DType::kF32);
    RETURN_IF_ERROR(CopyTensor(ctx, from, values_[i]));
  }
  return SynchronizeDevice(ctx);
}

absl::Status ParameterStore::CheckHostFlat(absl::string_view caller,
                                           const TensorView& host_values) const {
  const Shape want = {NumLocalElements()};
  if (!InHostMemory(host_values) || host_values.dtype != DType::kF32 || host_values.shape != want ||
      !host_values.IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(caller, ": host_values ", host_values.DebugString(), " must be contiguous f32",
                     ShapeToString(want), " on cpu"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ParameterStore::Find(const std::string& name) const {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].name == name) return static_cast<int>(i);
  }
  return absl::NotFoundError(absl::StrCat("no parameter named ", name));
}

int64_t ParameterStore::NumLocalElements() const {
  int64_t n = 0;
  for (const Shape& s : local_shapes_) n += NumElements(s);
  return n;
}

int64_t ParameterStore::NumGlobalElements() const {
  int64_t n = 0;
  for (const ParamSpec& s : specs_) n += NumElements(s.global_shape);
  return n;
}

absl::Status ParameterStore::ZeroGrads(const ExecContext& ctx) {
  return SetZero(ctx, flat_grads());
}

void ParameterStore::ZeroGrads() {
  CHECK(InHostMemory(device_)) << "ParameterStore::ZeroGrads() on a " << device_.ToString()
                               << " store: use ZeroGrads(ctx)";
  const absl::Status zeroed = SetZero(ExecContext(), flat_grads());
  CHECK(zeroed.ok()) << zeroed;  // Host memory: nothing can fail.
}

absl::StatusOr<Tensor> ParameterStore::CopyValuesToHost(const ExecContext& ctx) const {
  CHECK(allocated_) << "ParameterStore::CopyValuesToHost before Allocate";
  if (buffers().masters_released_) return ReleasedError("CopyValuesToHost");
  return CopyToHost(ctx, flat_values());
}

absl::StatusOr<Tensor> ParameterStore::CopyGradsToHost(const ExecContext& ctx) const {
  CHECK(allocated_) << "ParameterStore::CopyGradsToHost before Allocate";
  return CopyToHost(ctx, flat_grads());
}

absl::Status ParameterStore::CopyValuesFromHost(const ExecContext& ctx,
                                                const TensorView& host_values) {
  CHECK(allocated_) << "ParameterStore::CopyValuesFromHost before Allocate";
  if (owner_ != nullptr) return owner_->CopyValuesFromHost(ctx, host_values);
  if (masters_released_) return ReleasedError("CopyValuesFromHost");
  RETURN_IF_ERROR(CheckHostFlat("ParameterStore::CopyValuesFromHost", host_values));
  RETURN_IF_ERROR(CopyTensor(ctx, host_values, value_buffer_.view()));
  return RefreshComputeWeights(ctx);
}

}  // namespace nn
}  // namespace mt
