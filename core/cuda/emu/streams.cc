// The CUDA emulator's streams and events (cudart's functions, with their real names, for
// --config=cuda_emu). The emulated device finishes all work before a call returns, so a stream or
// an event carries no state beyond its existence, which is checked: a destroyed or unknown handle
// is cudaErrorInvalidResourceHandle, recorded for cudaGetLastError() as the runtime's errors are.
#include <mutex>
#include <set>

#include "core/cuda/emu/internal.h"

struct CUstream_st {};
struct CUevent_st {};

namespace mt {
namespace cuda_emu {
namespace {
std::mutex handle_mutex;
std::set<const void*>& LiveHandles() {
  static auto* handles = new std::set<const void*>();
  return *handles;
}
void AddHandle(const void* h) {
  std::lock_guard<std::mutex> lock(handle_mutex);
  LiveHandles().insert(h);
}
bool LiveHandle(const void* h) {
  std::lock_guard<std::mutex> lock(handle_mutex);
  return LiveHandles().count(h) != 0;
}
bool RemoveHandle(const void* h) {
  std::lock_guard<std::mutex> lock(handle_mutex);
  return LiveHandles().erase(h) != 0;
}
cudaError_t InvalidHandle() {
  SetLastError(cudaErrorInvalidResourceHandle);
  return cudaErrorInvalidResourceHandle;
}
}  // namespace
}  // namespace cuda_emu
}  // namespace mt

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = new CUstream_st();
  mt::cuda_emu::AddHandle(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || !mt::cuda_emu::RemoveHandle(stream)) {
    return mt::cuda_emu::InvalidHandle();
  }
  delete stream;
  return cudaSuccess;
}

// The null stream is always valid.
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream != nullptr && !mt::cuda_emu::LiveHandle(stream)) {
    return mt::cuda_emu::InvalidHandle();
  }
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st();
  mt::cuda_emu::AddHandle(*event);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr || !mt::cuda_emu::RemoveHandle(event)) {
    return mt::cuda_emu::InvalidHandle();
  }
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr || !mt::cuda_emu::LiveHandle(event)) {
    return mt::cuda_emu::InvalidHandle();
  }
  return cudaStreamSynchronize(stream);
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return cudaEventRecord(event, nullptr); }
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return cudaEventRecord(event, nullptr); }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr || !mt::cuda_emu::LiveHandle(event)) {
    return mt::cuda_emu::InvalidHandle();
  }
  return cudaStreamSynchronize(stream);
}

}  // extern "C"
