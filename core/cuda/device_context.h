// Per-device, per-stream resources that some CUDA ops need: a cuBLASLt handle with its workspace
// and a cache of GEMM plans (plus a cuBLAS handle for the shapes cuBLASLt has no kernel for), a
// growable device scratch buffer (reduction partials, sort buffers, column-sum partials) and a
// small pinned host buffer (results read back by reductions and id checks). Plain C++ (no CUDA
// headers), so trainers and tests can create one.
//
// Usage: create one per device and stream, and hand it to the ops through the ExecContext:
//
//   ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceContext> dc, cuda::DeviceContext::Create(0));
//   ExecContext ctx;
//   ctx.cuda_stream = stream;  // the stream every op of this context runs on
//   ctx.cuda = dc.get();
//
// Which ops need it: Gemm/BatchedGemm, BiasGrad, LayerNormBackward, the reductions, Embedding and
// EmbeddingBackward, CrossEntropy(Backward) and the sharded cross-entropy phases that check
// targets. On CUDA tensors they return FailedPrecondition without one (the other ops ignore it).
//
// Thread-safety and streams: not thread-safe. The workspace and scratch are reused by every call,
// which is safe only when all of them are issued on ONE stream (the stream orders the kernels);
// give each stream (and each thread) its own DeviceContext. The object must outlive the work
// queued with it: its destructor synchronizes the device before freeing.
//
// In CPU-only builds Create returns Unimplemented; without a device, FailedPrecondition.
#ifndef MT_CORE_CUDA_DEVICE_CONTEXT_H_
#define MT_CORE_CUDA_DEVICE_CONTEXT_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace mt {
namespace cuda {

namespace internal {
struct DeviceContextState;  // device_context_internal.h (CUDA builds only).
}  // namespace internal

class DeviceContext {
 public:
  struct Options {
    // cuBLASLt workspace; 32 MiB is what NVIDIA recommends for Hopper.
    size_t gemm_workspace_bytes = size_t{32} << 20;
  };

  // FailedPrecondition if `device` does not exist (the message names the devices there are),
  // ResourceExhausted if the workspace does not fit, Internal for other CUDA/cuBLAS errors.
  static absl::StatusOr<std::unique_ptr<DeviceContext>> Create(int device, const Options& options);
  static absl::StatusOr<std::unique_ptr<DeviceContext>> Create(int device) {
    return Create(device, Options());
  }
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // The CUDA ordinal this context serves.
  int device() const { return device_; }
  // GEMM shapes planned so far (for tests and logs).
  size_t gemm_plans() const;
  // Bytes of device scratch currently held (it grows to the largest request and stays).
  size_t scratch_bytes() const;

  // For core/cuda only.
  internal::DeviceContextState& state() { return *state_; }

 private:
  DeviceContext(int device, std::unique_ptr<internal::DeviceContextState> state);

  int device_;
  std::unique_ptr<internal::DeviceContextState> state_;
};

}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_DEVICE_CONTEXT_H_
