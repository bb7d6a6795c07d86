#include "core/alloc.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda_device.h"
#include "core/ops/elementwise.h"
#include "core/status.h"

namespace mt {

namespace {

// Makes a synchronous host <-> device copy safe for work queued on a non-default stream.
absl::Status SyncForHostCopy(const ExecContext& ctx, const Device& device) {
  if (ctx.cuda_stream == nullptr) return absl::OkStatus();
  return cuda::Synchronize(device.index);
}

bool Fits(const Tensor& t, const Shape& shape, DType dtype, const Device& device) {
  return !t.empty() && t.shape() == shape && t.dtype() == dtype && t.device() == device;
}

}  // namespace

absl::StatusOr<Tensor> Alloc(const ExecContext& ctx, Shape shape, DType dtype) {
  return Tensor::Empty(std::move(shape), dtype, ctx.device,
                       ctx.device.is_cpu() ? nullptr : ctx.memory_pool);
}

absl::StatusOr<Tensor> AllocZeros(const ExecContext& ctx, Shape shape, DType dtype) {
  ASSIGN_OR_RETURN(Tensor t, Alloc(ctx, std::move(shape), dtype));
  RETURN_IF_ERROR(SetZero(ctx, t.view()));
  return t;
}

bool InHostMemory(const TensorView& t) { return InHostMemory(t.device); }

bool InHostMemory(const Device& device) { return device.is_cpu(); }

absl::StatusOr<MemoryUsage> CurrentMemoryUsage(const Device& device) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return absl::InternalError("cannot read /proc/self/status");
  MemoryUsage usage;
  int found = 0;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long kib = 0;
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) {
      usage.resident_bytes = kib * 1024;
      ++found;
    } else if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) {
      usage.peak_resident_bytes = kib * 1024;
      ++found;
    }
  }
  std::fclose(f);
  if (found != 2) return absl::InternalError("/proc/self/status has no VmRSS/VmHWM lines");
  if (device.is_cuda()) {
    ASSIGN_OR_RETURN(const size_t in_use, cuda::MemoryInUse(device.index));
    usage.device_in_use_bytes = static_cast<int64_t>(in_use);
  }
  return usage;
}

absl::Status SetZero(const ExecContext& ctx, const TensorView& t) {
  if (t.nbytes() == 0) return absl::OkStatus();
  if (!t.IsContiguous() || t.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetZero: ", t.DebugString(), " must be contiguous with data"));
  }
  if (InHostMemory(t)) {
    // Large buffers (a store's gradients every step) are zeroed by all of the pool's threads:
    // one thread cannot fill the memory bandwidth.
    constexpr int64_t kChunkBytes = int64_t{1} << 20;
    char* bytes = static_cast<char*>(t.data);
    const int64_t n = t.nbytes();
    ParallelFor(ctx.pool, (n + kChunkBytes - 1) / kChunkBytes, 4, [&](int64_t c0, int64_t c1) {
      const int64_t begin = c0 * kChunkBytes;
      std::memset(bytes + begin, 0, std::min(n, c1 * kChunkBytes) - begin);
    });
    return absl::OkStatus();
  }
  return ops::Fill(ctx, t, 0.0);
}

absl::Status SynchronizeDevice(const ExecContext& ctx) {
  if (ctx.device.is_cpu()) return absl::OkStatus();
  return cuda::Synchronize(ctx.device.index);
}

absl::Status CopyLastDimSlice(const ExecContext& ctx, const TensorView& src, int64_t start,
                              const TensorView& dst) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("CopyLastDimSlice: src ", src.DebugString(),
                                                   ", dst ", dst.DebugString(), ", start ", start,
                                                   ": ", why));
  };
  if (!src.IsContiguous() || !dst.IsContiguous()) return bad("views must be contiguous");
  if (src.dtype != dst.dtype || src.device != dst.device) {
    return bad("dtypes and devices must be the same");
  }
  if (src.rank() < 1 || dst.rank() != src.rank() ||
      !std::equal(src.shape.begin(), src.shape.end() - 1, dst.shape.begin())) {
    return bad("need rank >= 1 and the same leading dimensions");
  }
  if (start < 0 || start + dst.dim(-1) > src.dim(-1)) return bad("columns outside src");
  if (dst.numel() == 0) return absl::OkStatus();
  const size_t es = DTypeSize(src.dtype);
  const size_t width = static_cast<size_t>(dst.dim(-1)) * es;
  const size_t pitch = static_cast<size_t>(src.dim(-1)) * es;
  const int64_t rows = dst.numel() / dst.dim(-1);
  const char* from = static_cast<const char*>(src.data) + start * es;
  char* to = static_cast<char*>(dst.data);
  if (InHostMemory(src)) {
    for (int64_t i = 0; i < rows; ++i) std::memcpy(to + i * width, from + i * pitch, width);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(SyncForHostCopy(ctx, src.device));
  RETURN_IF_ERROR(
      cuda::Memcpy2D(to, width, from, pitch, width, rows, cuda::CopyKind::kDeviceToDevice));
  return SyncForHostCopy(ctx, src.device);
}

absl::Status CopyTensor(const ExecContext& ctx, const TensorView& src, const TensorView& dst) {
  if (src.dtype != dst.dtype || src.numel() != dst.numel() || !src.IsContiguous() ||
      !dst.IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyTensor: src ", src.DebugString(), " and dst ", dst.DebugString(),
                     " must be contiguous with the same dtype and number of elements"));
  }
  const size_t n = src.nbytes();
  if (n == 0 || src.data == dst.data) {
    if (src.device != dst.device && n > 0) {
      return absl::InvalidArgumentError(absl::StrCat("CopyTensor: src ", src.DebugString(),
                                                     " and dst ", dst.DebugString(),
                                                     " share memory on different devices"));
    }
    return absl::OkStatus();
  }
  if (src.data == nullptr || dst.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("CopyTensor: src ", src.DebugString(),
                                                   " or dst ", dst.DebugString(), " has no data"));
  }
  if (src.device.is_cpu() && dst.device.is_cpu()) {
    std::memcpy(dst.data, src.data, n);
    return absl::OkStatus();
  }
  if (src.device.is_cuda() && dst.device.is_cuda()) {
    if (src.device != dst.device) {
      return absl::InvalidArgumentError(absl::StrCat("CopyTensor: src ", src.DebugString(),
                                                     " and dst ", dst.DebugString(),
                                                     " are on different GPUs"));
    }
    // A same-dtype Convert is a copy queued on ctx.cuda_stream (float dtypes only).
    if (IsFloating(src.dtype)) {
      return ops::Convert(ctx, TensorView(src.data, dst.shape, src.dtype, src.device), dst);
    }
    RETURN_IF_ERROR(SyncForHostCopy(ctx, src.device));
    RETURN_IF_ERROR(cuda::Memcpy(dst.data, src.data, n, cuda::CopyKind::kDeviceToDevice));
    return SyncForHostCopy(ctx, src.device);
  }
  const bool upload = src.device.is_cpu();
  const Device& gpu = upload ? dst.device : src.device;
  RETURN_IF_ERROR(SyncForHostCopy(ctx, gpu));
  RETURN_IF_ERROR(
      cuda::Memcpy(dst.data, src.data, n,
                   upload ? cuda::CopyKind::kHostToDevice : cuda::CopyKind::kDeviceToHost));
  return SyncForHostCopy(ctx, gpu);
}

absl::StatusOr<Tensor> CopyToHost(const ExecContext& ctx, const TensorView& src) {
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(src.shape, src.dtype, Device::Cpu()));
  RETURN_IF_ERROR(CopyTensor(ctx, src, t.view()));
  return t;
}

absl::StatusOr<Tensor> CopyToDevice(const ExecContext& ctx, const TensorView& src) {
  ASSIGN_OR_RETURN(Tensor t, Alloc(ctx, src.shape, src.dtype));
  RETURN_IF_ERROR(CopyTensor(ctx, src, t.view()));
  return t;
}

absl::StatusOr<TensorView> OnHost(const ExecContext& ctx, const TensorView& t, Tensor* staging,
                                  absl::string_view what) {
  if (!t.IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", t.DebugString(), " must be contiguous"));
  }
  if (t.device.is_cpu()) return t;
  if (!Fits(*staging, t.shape, t.dtype, Device::Cpu())) {
    ASSIGN_OR_RETURN(*staging, Tensor::Empty(t.shape, t.dtype, Device::Cpu()));
  }
  RETURN_IF_ERROR(CopyTensor(ctx, t, staging->view()));
  return staging->view();
}

absl::StatusOr<TensorView> OnDevice(const ExecContext& ctx, const TensorView& t, Tensor* staging,
                                    absl::string_view what) {
  if (!t.IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", t.DebugString(), " must be contiguous"));
  }
  if (t.device == ctx.device) return t;
  if (!t.device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", t.DebugString(), " is not on the context's device ",
                     ctx.device.ToString(), " (give host tensors or tensors on it)"));
  }
  if (!Fits(*staging, t.shape, t.dtype, ctx.device)) {
    ASSIGN_OR_RETURN(*staging, Alloc(ctx, t.shape, t.dtype));
  }
  RETURN_IF_ERROR(CopyTensor(ctx, t, staging->view()));
  return staging->view();
}

absl::StatusOr<TensorView> HostStaging::Download(const ExecContext& ctx, const TensorView& t) {
  if (!t.IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostStaging::Download: ", t.DebugString(), " must be contiguous"));
  }
  if (InHostMemory(t)) return t;
  ASSIGN_OR_RETURN(TensorView host, Stage(t));
  RETURN_IF_ERROR(CopyTensor(ctx, t, host));
  return host;
}

absl::StatusOr<TensorView> HostStaging::ForWriting(const TensorView& t) {
  if (!t.IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostStaging::ForWriting: ", t.DebugString(), " must be contiguous"));
  }
  if (InHostMemory(t)) return t;
  return Stage(t);
}

absl::StatusOr<TensorView> HostStaging::Stage(const TensorView& t) {
  if (t.nbytes() > buffer_.nbytes()) {
    buffer_ = Buffer();  // Free the old buffer first.
    ASSIGN_OR_RETURN(buffer_, Buffer::Allocate(Device::Cpu(), t.nbytes()));
  }
  return TensorView(buffer_.data(), t.shape, t.dtype);
}

}  // namespace mt
