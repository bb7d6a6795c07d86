// The CUDA emulator's runtime: the cudart functions the project calls, with their real names, for
// --config=cuda_emu (where libcudart is not linked). One emulated device by default
// (MT_CUDA_EMU_DEVICES=N for more), synchronous streams and events (streams.cc), and device memory
// that host code cannot touch outside the emulated device's own work (internal.h DeviceAccess).
// Copies and memsets check that their device ranges lie inside one allocation and that the copy
// kind matches the pointers.
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/cuda/emu/internal.h"

namespace mt {
namespace cuda_emu {
namespace {

constexpr size_t kTotalMemory = size_t{16} << 30;  // what cudaMemGetInfo reports as total

struct Allocation {
  char* map;         // the mapping: data, padding up to a page, then an inaccessible page
  size_t map_bytes;  // including the inaccessible page
  size_t bytes;      // requested
  int device;
  bool open = false;  // mprotect fallback: made accessible since the current DeviceAccess began
};

// How device memory is kept from host code (internal.h DeviceAccess).
enum class Protection { kNone, kKey, kMprotect };

struct State {
  std::mutex mutex;
  Protection protection = Protection::kNone;
  int key = -1;                              // the allocations' protection key (kKey)
  std::map<const char*, Allocation> device;  // by data pointer
  std::map<const char*, size_t> pinned;      // cudaMallocHost, by pointer
  size_t in_use = 0;
  int access = 0;  // live DeviceAccess objects
};

void InstallFaultHandler();

State& GetState() {
  static State* const state = [] {
    auto* s = new State();
    const char* env = std::getenv("MT_CUDA_EMU_PROTECT");
    const std::string mode = env != nullptr ? env : "";
    if (mode == "0") return s;
    s->key = mode == "mprotect" ? -1 : pkey_alloc(0, PKEY_DISABLE_ACCESS);
    s->protection = s->key >= 0 ? Protection::kKey : Protection::kMprotect;
    if (s->protection == Protection::kMprotect) InstallFaultHandler();
    return s;
  }();
  return *state;
}

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

size_t Page() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

int DeviceCount() {
  const char* env = std::getenv("MT_CUDA_EMU_DEVICES");
  const int n = env != nullptr ? std::atoi(env) : 1;
  return n < 0 ? 0 : n;
}

// Applies the mprotect fallback to one allocation (not its trailing page).
void Protect(const Allocation& a, bool accessible) {
  if (mprotect(a.map, a.map_bytes - Page(), accessible ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    Fail("cannot change device memory's protection");
  }
}

// The mprotect fallback opens allocations lazily: a DeviceAccess changes no protection when it
// begins; the first access to an allocation while one is alive faults, and the handler makes that
// allocation accessible and marks it open; the last DeviceAccess to end protects again only the
// open ones. A kernel touches a few of the hundreds of live allocations, and every mprotect call
// costs a page-table walk and a TLB shootdown on every core running the process (on a 2-core VM
// the emulated training tests spent three quarters of their time there when every allocation was
// opened and closed at each launch). Faults that are not a first touch of a device allocation
// inside a DeviceAccess (host code on device memory, guard pages, unmapped memory) go to the
// handler that was installed before, or kill the process as they would have without this one.
struct sigaction previous_segv_action;

// Opens the allocation holding `addr` if a DeviceAccess is alive; false if the fault is not a
// first touch of a device allocation. Faults that reach here are synchronous accesses by kernels,
// copies, cuBLAS calls or host code. None of them touches device memory while holding the mutex,
// but the emulator's own code under it could still crash (a bug): a mutex that stays taken for a
// second is then this thread's own, and the fault is not ours. Nothing slow runs under it.
bool OpenOnFirstTouch(State& s, const char* addr) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!s.mutex.try_lock()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    sched_yield();
  }
  std::lock_guard<std::mutex> lock(s.mutex, std::adopt_lock);
  if (s.access == 0) return false;
  auto it = s.device.upper_bound(addr);
  if (it == s.device.begin()) return false;
  --it;
  Allocation& a = it->second;
  if (addr < a.map || addr >= a.map + a.map_bytes - Page()) return false;
  // An allocation already open was opened by another thread's fault meanwhile: the access is
  // simply retried.
  if (!a.open) {
    Protect(a, true);
    a.open = true;
  }
  return true;
}

void OnSegv(int sig, siginfo_t* info, void* context) {
  // A SIGSEGV sent by kill() or raise() (si_code <= 0) has no access to retry.
  if (info->si_code > 0 && OpenOnFirstTouch(GetState(), static_cast<const char*>(info->si_addr))) {
    return;  // The access is retried and succeeds.
  }
  const struct sigaction previous = previous_segv_action;
  const bool handler = (previous.sa_flags & SA_SIGINFO) != 0 ||
                       (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN);
  if (!handler || (previous.sa_flags & SA_RESETHAND) != 0) signal(SIGSEGV, SIG_DFL);
  if (!handler) {
    // The default action: a fault is taken again on return and ends the process; a sent signal
    // is raised again.
    if (info->si_code <= 0) raise(SIGSEGV);
    return;
  }
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(sig, info, context);
  } else {
    previous.sa_handler(sig);
  }
}

void InstallFaultHandler() {
  struct sigaction action = {};
  action.sa_sigaction = &OnSegv;
  action.sa_flags = SA_SIGINFO;  // A fault inside the handler itself ends the process.
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGSEGV, &action, &previous_segv_action) != 0) {
    Fail("cannot install the device memory fault handler");
  }
}

// The allocation holding [p, p + bytes), or null. Caller holds the mutex.
const Allocation* Find(State& s, const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = s.device.upper_bound(c);
  if (it == s.device.begin()) return nullptr;
  --it;
  const char* begin = it->first;
  const char* end = begin + it->second.bytes;
  if (c < begin || c > end || bytes > static_cast<size_t>(end - c)) return nullptr;
  return &it->second;
}

bool IsPinned(State& s, const void* p) {
  const char* c = static_cast<const char*>(p);
  auto it = s.pinned.upper_bound(c);
  if (it == s.pinned.begin()) return false;
  --it;
  return c < it->first + it->second;
}

cudaError_t Record(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

// Checks one side of a copy: `device` says which kind of memory it must be.
bool SideOk(State& s, const void* p, size_t bytes, bool device) {
  const bool in_device = Find(s, p, 0) != nullptr;
  if (!device) return !in_device;
  return Find(s, p, bytes) != nullptr;
}

cudaError_t Copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  State& s = GetState();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    bool dst_device = false, src_device = false;
    switch (kind) {
      case cudaMemcpyHostToHost:
        break;
      case cudaMemcpyHostToDevice:
        dst_device = true;
        break;
      case cudaMemcpyDeviceToHost:
        src_device = true;
        break;
      case cudaMemcpyDeviceToDevice:
        dst_device = src_device = true;
        break;
      case cudaMemcpyDefault:
        dst_device = Find(s, dst, 0) != nullptr;
        src_device = Find(s, src, 0) != nullptr;
        break;
      default:
        return Record(cudaErrorInvalidMemcpyDirection);
    }
    if (!SideOk(s, dst, count, dst_device) || !SideOk(s, src, count, src_device)) {
      Fail(
          "cudaMemcpy of %zu bytes (kind %d) from %p to %p: a pointer is not of the kind the "
          "copy names, or the range runs past its allocation",
          count, static_cast<int>(kind), src, dst);
    }
  }
  DeviceAccess access;
  std::memmove(dst, src, count);
  return cudaSuccess;
}

}  // namespace

void SetLastError(cudaError_t error) { last_error = error; }

DeviceAccess::DeviceAccess() {
  State& s = GetState();
  if (s.protection == Protection::kKey) {
    saved_rights_ = pkey_get(s.key);
    pkey_set(s.key, 0);
    return;
  }
  if (s.protection == Protection::kNone) return;
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.access;  // Allocations open on first touch (OnSegv).
}

DeviceAccess::~DeviceAccess() {
  State& s = GetState();
  if (s.protection == Protection::kKey) {
    pkey_set(s.key, saved_rights_);
    return;
  }
  if (s.protection == Protection::kNone) return;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (--s.access == 0) {
    for (auto& entry : s.device) {
      if (!entry.second.open) continue;
      Protect(entry.second, false);
      entry.second.open = false;
    }
  }
}

bool IsDeviceRange(const void* p, size_t bytes) {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mutex);
  return Find(s, p, bytes) != nullptr;
}

}  // namespace cuda_emu
}  // namespace mt

using mt::cuda_emu::GetState;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = mt::cuda_emu::DeviceCount();
  return *count > 0 ? cudaSuccess : mt::cuda_emu::Record(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= mt::cuda_emu::DeviceCount()) {
    return mt::cuda_emu::Record(cudaErrorInvalidDevice);
  }
  mt::cuda_emu::current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = mt::cuda_emu::current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= mt::cuda_emu::DeviceCount()) {
    return mt::cuda_emu::Record(cudaErrorInvalidDevice);
  }
  std::memset(prop, 0, sizeof(*prop));
  std::strncpy(prop->name, "mt CUDA emulator (CPU)", sizeof(prop->name) - 1);
  prop->totalGlobalMem = mt::cuda_emu::kTotalMemory;
  prop->sharedMemPerBlock = mt::cuda_emu::kDefaultDynamicShared;
  prop->sharedMemPerBlockOptin = mt::cuda_emu::kMaxDynamicSharedOptIn;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = mt::cuda_emu::last_error;
  mt::cuda_emu::last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return mt::cuda_emu::last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    default:
      return "cudaErrorUnknown (emulated)";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    default:
      return "unknown error (emulated)";
  }
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  using mt::cuda_emu::Page;
  auto& s = GetState();
  *ptr = nullptr;
  // Only the reservation and the registration hold the mutex: the mapping and its fill (seconds
  // for gigabytes) run outside it, where they stall no other thread's launches or faults.
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (size > mt::cuda_emu::kTotalMemory - s.in_use) {
      return mt::cuda_emu::Record(cudaErrorMemoryAllocation);
    }
    s.in_use += size;
  }
  // The data ends (256-byte aligned start, as cudaMalloc's) just before an inaccessible page.
  const size_t padded = (size + 255) / 256 * 256;
  const size_t data_pages = (padded + Page() - 1) / Page() * Page();
  const size_t map_bytes = (data_pages == 0 ? Page() : data_pages) + Page();
  void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.in_use -= size;
    return mt::cuda_emu::Record(cudaErrorMemoryAllocation);
  }
  char* map = static_cast<char*>(m);
  char* guard = map + map_bytes - Page();
  char* data = guard - padded;
  // Fresh device memory is not zero: NaN bytes make reads of never-written memory visible.
  std::memset(data, 0xFF, padded);
  if (mprotect(guard, Page(), PROT_NONE) != 0) {
    mt::cuda_emu::Fail("cannot protect device memory's guard page");
  }
  mt::cuda_emu::Allocation a{map, map_bytes, size, mt::cuda_emu::current_device};
  if (s.protection == mt::cuda_emu::Protection::kKey) {
    if (pkey_mprotect(map, map_bytes - Page(), PROT_READ | PROT_WRITE, s.key) != 0) {
      mt::cuda_emu::Fail("cannot give device memory its protection key");
    }
  } else if (s.protection == mt::cuda_emu::Protection::kMprotect) {
    mt::cuda_emu::Protect(a, false);  // Opened on first touch, as the others.
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.device.emplace(data, a);
  }
  *ptr = data;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  auto& s = GetState();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.device.find(static_cast<const char*>(ptr));
  if (it == s.device.end()) {
    mt::cuda_emu::Fail("cudaFree(%p): not the start of a live cudaMalloc allocation", ptr);
  }
  s.in_use -= it->second.bytes;
  munmap(it->second.map, it->second.map_bytes);
  s.device.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  *ptr = std::malloc(size == 0 ? 1 : size);
  if (*ptr == nullptr) return mt::cuda_emu::Record(cudaErrorMemoryAllocation);
  auto& s = GetState();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.pinned.emplace(static_cast<const char*>(*ptr), size);
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  auto& s = GetState();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.pinned.erase(static_cast<const char*>(ptr)) == 0) {
      mt::cuda_emu::Fail("cudaFreeHost(%p): not from cudaMallocHost", ptr);
    }
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  auto& s = GetState();
  std::lock_guard<std::mutex> lock(s.mutex);
  *total = mt::cuda_emu::kTotalMemory;
  *free_bytes = mt::cuda_emu::kTotalMemory - s.in_use;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  auto& s = GetState();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::memset(attributes, 0, sizeof(*attributes));
  attributes->device = -2;
  if (const mt::cuda_emu::Allocation* a = mt::cuda_emu::Find(s, ptr, 0)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = a->device;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (mt::cuda_emu::IsPinned(s, ptr)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = 0;
    attributes->hostPointer = const_cast<void*>(ptr);
    attributes->devicePointer = const_cast<void*>(ptr);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return mt::cuda_emu::Copy(dst, src, count, kind);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t) {
  return mt::cuda_emu::Copy(dst, src, count, kind);
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
  if (width > dpitch || width > spitch) return mt::cuda_emu::Record(cudaErrorInvalidPitchValue);
  for (size_t r = 0; r < height; ++r) {
    const cudaError_t e =
        mt::cuda_emu::Copy(static_cast<char*>(dst) + r * dpitch,
                           static_cast<const char*>(src) + r * spitch, width, kind);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
  if (count == 0) return cudaSuccess;
  if (!mt::cuda_emu::IsDeviceRange(ptr, count)) {
    mt::cuda_emu::Fail("cudaMemset of %zu bytes at %p: not inside one device allocation", count,
                       ptr);
  }
  mt::cuda_emu::DeviceAccess access;
  std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  return cudaMemsetAsync(ptr, value, count, nullptr);
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) {
    return mt::cuda_emu::Record(cudaErrorInvalidValue);
  }
  if (value < 0 || value > mt::cuda_emu::kMaxDynamicSharedOptIn) {
    return mt::cuda_emu::Record(cudaErrorInvalidValue);
  }
  mt::cuda_emu::SetMaxDynamicShared(func, value);
  return cudaSuccess;
}

}  // extern "C"
