// Tensors: owning storage (Buffer, Tensor) separate from cheap non-owning views (TensorView).
//
// A TensorView is (pointer, shape, strides, dtype, device); copying it copies no data and frees
// nothing. Kernels and ops take views. A Buffer owns one device allocation and is move-only; a
// Tensor is a Buffer plus the shape/dtype it was allocated for. Shapes are row-major and strides
// are in elements. All ops in core/ops require contiguous views (IsContiguous()).
#ifndef MT_CORE_TENSOR_H_
#define MT_CORE_TENSOR_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "core/dtype.h"
#include "glog/logging.h"

namespace mt {

using Shape = absl::InlinedVector<int64_t, 6>;

// Product of the dimensions (1 for a scalar shape []).
int64_t NumElements(absl::Span<const int64_t> shape);
// "[2, 3, 4]".
std::string ShapeToString(absl::Span<const int64_t> shape);
// Row-major strides for `shape`.
Shape ContiguousStrides(absl::Span<const int64_t> shape);

struct TensorView {
  void* data = nullptr;
  Shape shape;
  Shape strides;  // In elements.
  DType dtype = DType::kF32;
  Device device = Device::Cpu();

  TensorView() = default;
  // A contiguous view of `data`.
  TensorView(void* data, Shape shape, DType dtype, Device device = Device::Cpu());

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const { return NumElements(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  // Size of dimension d; negative d counts from the end.
  int64_t dim(int d) const { return shape[d < 0 ? d + rank() : d]; }
  bool IsContiguous() const;

  // Typed pointer; CHECK-fails if T does not match the dtype (a programmer error).
  template <typename T>
  T* data_as() const {
    CHECK(DTypeOf<T>::value == dtype)
        << "tensor holds " << DTypeName(dtype) << ", accessed as " << DTypeName(DTypeOf<T>::value);
    return static_cast<T*>(data);
  }

  // Rows [begin, end) of dimension 0 (contiguous if this view is).
  TensorView Slice(int64_t begin, int64_t end) const;
  // The same elements with another shape; InvalidArgument unless contiguous with equal numel.
  absl::StatusOr<TensorView> Reshape(Shape new_shape) const;
  // Reshape to [numel / last, last]; CHECK-fails on rank 0.
  TensorView Flatten2D() const;

  // "f32[2, 3] on cpu".
  std::string DebugString() const;
};

// Where device memory can come from instead of cudaMalloc / cudaFree, e.g. a caching allocator
// (core/cuda/caching_allocator.h), which makes per-step scratch tensors cheap. A pool must outlive
// every buffer it served, and memory it hands out again must not still be in use by queued kernels
// (true when all of them run on one stream).
class DeviceMemoryPool {
 public:
  virtual ~DeviceMemoryPool() = default;
  // ResourceExhausted when out of memory.
  virtual absl::StatusOr<void*> Allocate(size_t nbytes) = 0;
  virtual void Free(void* ptr) = 0;
};

// The host memory of this process's host Buffers (every CPU tensor): bytes held now and the most
// held at once since the process started or the last ResetHostTensorPeak. A process-wide
// statistic (atomics, thread-safe), like the resident set it is a finer part of: what
// measurements of activation memory read (docs/perf/context_parallel.md). Sizes as requested.
struct HostTensorBytes {
  int64_t in_use = 0;
  int64_t peak = 0;
};
HostTensorBytes HostTensorMemory();
// Sets the peak to the bytes held now.
void ResetHostTensorPeak();

// One allocation on one device. Move-only.
class Buffer {
 public:
  Buffer() = default;
  // ResourceExhausted if the device is out of memory; Unimplemented for CUDA in CPU-only builds.
  // CUDA memory comes from `pool` when given (ignored for the CPU), and goes back to it.
  static absl::StatusOr<Buffer> Allocate(Device device, size_t nbytes,
                                         DeviceMemoryPool* pool = nullptr);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void Release();
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_ = Device::Cpu();
  DeviceMemoryPool* pool_ = nullptr;
};

// A contiguous tensor that owns its memory. Move-only; hand out views with view().
class Tensor {
 public:
  Tensor() = default;
  // Uninitialised memory on `device` (CUDA memory from `pool` when given; see Buffer::Allocate).
  static absl::StatusOr<Tensor> Empty(Shape shape, DType dtype, Device device = Device::Cpu(),
                                      DeviceMemoryPool* pool = nullptr);
  // Host tensors: CHECK-fail only if the host is out of memory. Zeros() clears the memory.
  static Tensor Host(Shape shape, DType dtype);
  static Tensor Zeros(Shape shape, DType dtype);

  const TensorView& view() const { return view_; }
  void* data() const { return view_.data; }
  template <typename T>
  T* data_as() const {
    return view_.data_as<T>();
  }
  const Shape& shape() const { return view_.shape; }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  bool empty() const { return buffer_.data() == nullptr && view_.numel() == 0; }

 private:
  Buffer buffer_;
  // Default-constructed: shape [0] (numel 0, nbytes 0, empty()), not a rank-0 scalar of 1 element.
  TensorView view_{nullptr, Shape{0}, DType::kF32};
};

}  // namespace mt

#endif  // MT_CORE_TENSOR_H_
