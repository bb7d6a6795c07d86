#include "core/tensor.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cuda_device.h"

namespace mt {

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

Shape ContiguousStrides(absl::Span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

TensorView::TensorView(void* data, Shape shape, DType dtype, Device device)
    : data(data), shape(std::move(shape)), dtype(dtype), device(device) {
  strides = ContiguousStrides(this->shape);
}

bool TensorView::IsContiguous() const {
  int64_t s = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

TensorView TensorView::Slice(int64_t begin, int64_t end) const {
  CHECK_GE(rank(), 1);
  CHECK(0 <= begin && begin <= end && end <= shape[0])
      << "slice [" << begin << ", " << end << ") of " << DebugString();
  TensorView v = *this;
  v.shape[0] = end - begin;
  v.data = static_cast<char*>(data) + begin * strides[0] * static_cast<int64_t>(DTypeSize(dtype));
  return v;
}

absl::StatusOr<TensorView> TensorView::Reshape(Shape new_shape) const {
  if (!IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape non-contiguous ", DebugString()));
  }
  if (NumElements(new_shape) != numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", DebugString(), " to ", ShapeToString(new_shape)));
  }
  return TensorView(data, std::move(new_shape), dtype, device);
}

TensorView TensorView::Flatten2D() const {
  CHECK_GE(rank(), 1);
  CHECK(IsContiguous()) << DebugString();
  const int64_t last = shape.back();
  return TensorView(data, Shape{last == 0 ? 0 : numel() / last, last}, dtype, device);
}

std::string TensorView::DebugString() const {
  return absl::StrCat(DTypeName(dtype), ShapeToString(shape), " on ", device.ToString());
}

namespace {
std::atomic<int64_t> host_in_use{0};
std::atomic<int64_t> host_peak{0};

void CountHost(int64_t delta) {
  const int64_t now = host_in_use.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = host_peak.load(std::memory_order_relaxed);
  while (now > peak && !host_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

HostTensorBytes HostTensorMemory() {
  return {host_in_use.load(std::memory_order_relaxed), host_peak.load(std::memory_order_relaxed)};
}

void ResetHostTensorPeak() {
  host_peak.store(host_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

absl::StatusOr<Buffer> Buffer::Allocate(Device device, size_t nbytes, DeviceMemoryPool* pool) {
  Buffer b;
  b.device_ = device;
  b.nbytes_ = nbytes;
  if (nbytes == 0) return b;
  if (device.is_cpu()) {
    // 64-byte alignment for vector loads. From 1 MiB on, a page's (4096), so that files can be
    // read around the page cache straight into large tensors (O_DIRECT wants file offsets and
    // addresses aligned alike; checkpoint/direct_read.h). From 32 MiB on, a huge page's (2 MiB),
    // with the advice to back it by huge pages: a direct read into memory of 4 KiB pages ran at
    // a third to half the rate of one into huge pages on a virtio disk (a segment per page), and
    // costs the kernel a pin per page. aligned_alloc wants a multiple of the alignment.
    constexpr size_t kPageAlignedFrom = size_t{1} << 20;
    constexpr size_t kHugePagesFrom = size_t{32} << 20;
    const size_t align = nbytes >= kHugePagesFrom     ? (size_t{2} << 20)
                         : nbytes >= kPageAlignedFrom ? 4096
                                                      : 64;
    const size_t rounded = (nbytes + align - 1) / align * align;
    b.data_ = std::aligned_alloc(align, rounded);
    if (b.data_ != nullptr && nbytes >= kHugePagesFrom) {
      ::madvise(b.data_, rounded, MADV_HUGEPAGE);  // Advice only: 4 KiB pages where refused.
    }
    if (b.data_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host out of memory allocating ", nbytes, " bytes"));
    }
    CountHost(static_cast<int64_t>(nbytes));
    return b;
  }
  if (pool != nullptr) {
    auto ptr = pool->Allocate(nbytes);
    if (!ptr.ok()) return ptr.status();
    b.data_ = *ptr;
    b.pool_ = pool;
    return b;
  }
  auto ptr = cuda::Malloc(device.index, nbytes);
  if (!ptr.ok()) return ptr.status();
  b.data_ = *ptr;
  return b;
}

Buffer::~Buffer() { Release(); }

void Buffer::Release() {
  if (data_ == nullptr) return;
  if (device_.is_cpu()) {
    std::free(data_);
    CountHost(-static_cast<int64_t>(nbytes_));
  } else if (pool_ != nullptr) {
    pool_->Free(data_);
  } else {
    cuda::Free(device_.index, data_);
  }
  data_ = nullptr;
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      nbytes_(std::exchange(other.nbytes_, 0)),
      device_(other.device_),
      pool_(std::exchange(other.pool_, nullptr)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    nbytes_ = std::exchange(other.nbytes_, 0);
    device_ = other.device_;
    pool_ = std::exchange(other.pool_, nullptr);
  }
  return *this;
}

absl::StatusOr<Tensor> Tensor::Empty(Shape shape, DType dtype, Device device,
                                     DeviceMemoryPool* pool) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeToString(shape)));
    }
  }
  Tensor t;
  const size_t nbytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  auto buffer = Buffer::Allocate(device, nbytes, pool);
  if (!buffer.ok()) return buffer.status();
  t.buffer_ = std::move(*buffer);
  t.view_ = TensorView(t.buffer_.data(), std::move(shape), dtype, device);
  return t;
}

Tensor Tensor::Host(Shape shape, DType dtype) {
  auto t = Empty(std::move(shape), dtype, Device::Cpu());
  CHECK(t.ok()) << t.status();
  return std::move(*t);
}

Tensor Tensor::Zeros(Shape shape, DType dtype) {
  Tensor t = Host(std::move(shape), dtype);
  if (t.nbytes() > 0) std::memset(t.data(), 0, t.nbytes());
  return t;
}

}  // namespace mt
