// The device side of the CUDA emulator (--config=cuda_emu): what a kernel source needs to compile
// as host C++ and run on the CPU. core/cuda/kernel_util.cuh includes this header instead of
// relying on nvcc when MT_CUDA_EMULATION is defined, after the CUDA headers (whose host halves
// give the types: dim3, cudaError_t, __nv_bfloat16, __half and their host conversions).
//
// How a kernel runs: every block of the grid in turn, and within a block one fiber per CUDA
// thread, all on the calling OS thread. A fiber runs until it reaches a barrier (__syncthreads,
// __syncwarp, a warp shuffle) or returns; when every fiber waits, the barrier that all its
// participants reached is released. So the emulator
//   - runs the kernel's own code, indexing and barriers included, against host memory;
//   - stops with a message naming the kernel when a barrier can never be released (divergent
//     __syncthreads, a shuffle or __syncwarp missing a lane of its mask);
//   - exposes missing barriers: without lockstep warps, a thread that reads shared memory before
//     its writer's barrier sees the wrong value. Successive launches run the threads of each block
//     in order and in reverse order by turns, which between them expose both directions of such
//     a race (MT_CUDA_EMU_REVERSE=0 or 1 fixes the order).
// `__shared__` variables are function-level statics (the blocks of a launch run one at a time);
// dynamic shared memory is a fresh buffer per block, filled with 0xFF bytes (NaN floats) so that
// reading an element nobody wrote shows up in the results, and sized exactly, with an inaccessible
// page after it.
//
// Numerics: the host's expf/tanhf/logf stand in for the device's (both within a few ulp), and the
// kernel TUs are compiled with -ffp-contract=off, so the __f*_rn intrinsics are exact and plain
// expressions are not fused (nvcc may fuse them; the difference is within float rounding).
#ifndef MT_CORE_CUDA_EMU_EMU_H_
#define MT_CORE_CUDA_EMU_EMU_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda/emu/internal.h"

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Blocks run one at a time, so a function-level static is the block's shared variable (per host
// thread: two threads may run kernels at once). Unlike dynamic shared memory, these are neither
// poisoned nor guarded, and keep their values between blocks.
#define __shared__ static thread_local

namespace mt {
namespace cuda_emu {

// The CUDA thread a fiber stands for.
struct ThreadState {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  int linear;  // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
};

// The thread whose fiber is running (valid only inside a kernel).
const ThreadState& Current();

// Runs body() once per CUDA thread of the grid (see the top of the file). `kernel` names the
// kernel in messages and identifies it for cudaFuncSetAttribute. Sets the emulated last error
// (cudaErrorInvalidConfiguration, cudaErrorInvalidValue) instead of running when the launch would
// fail on a GPU.
void RunGrid(const void* kernel, const char* name, dim3 grid, dim3 block, size_t shared_bytes,
             cudaStream_t stream, const std::function<void()>& body);

// The block's dynamic shared memory (the launch's shared_bytes).
void* DynamicSharedMemory();

void SyncThreads();
void SyncWarp(unsigned mask);
// Every lane of `mask` (this lane included) deposits `bits`; returns the bits of lane `src`.
uint64_t WarpExchange(unsigned mask, uint64_t bits, int src_lane);

// Fails unless p is null or inside a cudaMalloc allocation: a kernel given a host pointer.
void CheckKernelPointer(const void* p, const char* kernel, int index);

template <typename V>
void CheckArgument(const V& v, const char* kernel, int index) {
  if constexpr (std::is_pointer<V>::value) {
    CheckKernelPointer(static_cast<const void*>(v), kernel, index);
  }
}
template <typename Tuple, size_t... I>
void CheckArguments(const Tuple& args, const char* kernel, std::index_sequence<I...>) {
  (CheckArgument(std::get<I>(args), kernel, static_cast<int>(I)), ...);
}

// The launch syntax: MT_LAUNCH(grid, block, shared, stream, kernel)(args...) in kernel_util.cuh.
template <typename... P>
class Launcher {
 public:
  Launcher(dim3 grid, dim3 block, size_t shared, cudaStream_t stream, void (*kernel)(P...),
           const char* name)
      : grid_(grid),
        block_(block),
        shared_(shared),
        stream_(stream),
        kernel_(kernel),
        name_(name) {}

  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong argument count");
    // Arguments are converted to the parameter types once, as at a CUDA launch; each thread then
    // gets its own copy (kernel parameters are per-thread values).
    const std::tuple<std::decay_t<P>...> params(static_cast<std::decay_t<P>>(args)...);
    CheckArguments(params, name_, std::index_sequence_for<P...>{});
    RunGrid(reinterpret_cast<const void*>(kernel_), name_, grid_, block_, shared_, stream_, [&] {
      std::tuple<std::decay_t<P>...> copy = params;
      std::apply(kernel_, copy);
    });
  }

 private:
  dim3 grid_, block_;
  size_t shared_;
  cudaStream_t stream_;
  void (*kernel_)(P...);
  const char* name_;
};

template <typename... P>
Launcher<P...> MakeLauncher(dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                            void (*kernel)(P...), const char* name) {
  return Launcher<P...>(grid, block, shared, stream, kernel, name);
}

template <typename V>
uint64_t ToBits(V v) {
  static_assert(sizeof(V) <= sizeof(uint64_t) && std::is_trivially_copyable<V>::value,
                "shuffled type");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(V));
  return bits;
}
template <typename V>
V FromBits(uint64_t bits) {
  V v;
  std::memcpy(&v, &bits, sizeof(V));
  return v;
}

// cub::DeviceRadixSort::SortPairs: a stable sort of (key, value) pairs by bits
// [begin_bit, end_bit) of the key, as CUB documents it. With temp null it only sets temp_bytes.
struct DeviceRadixSort {
  template <typename K, typename V, typename N>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out,
                               const V* values_in, V* values_out, N num_items, int begin_bit = 0,
                               int end_bit = sizeof(K) * 8, cudaStream_t stream = nullptr) {
    // CUB flips bits of signed and floating-point keys; only unsigned ones are emulated.
    static_assert(std::is_integral<K>::value && std::is_unsigned<K>::value,
                  "the emulated radix sort takes unsigned integer keys");
    if (temp == nullptr) {
      temp_bytes = 1;  // CUB never asks for none; keep callers' allocation path exercised.
      return cudaSuccess;
    }
    if (num_items < 0 || begin_bit < 0 || end_bit > static_cast<int>(sizeof(K) * 8) ||
        begin_bit > end_bit) {
      return cudaErrorInvalidValue;
    }
    const int64_t n = static_cast<int64_t>(num_items);
    const size_t nn = static_cast<size_t>(n);
    if (!IsDeviceRange(temp, temp_bytes) || !IsDeviceRange(keys_in, nn * sizeof(K)) ||
        !IsDeviceRange(keys_out, nn * sizeof(K)) || !IsDeviceRange(values_in, nn * sizeof(V)) ||
        !IsDeviceRange(values_out, nn * sizeof(V))) {
      Fail("cub::DeviceRadixSort::SortPairs: a buffer is not device memory of the right size");
    }
    DeviceAccess access;
    const int width = end_bit - begin_bit;
    const uint64_t field = width >= 64 ? ~uint64_t{0} : ((uint64_t{1} << width) - 1) << begin_bit;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return (static_cast<uint64_t>(keys_in[a]) & field) <
             (static_cast<uint64_t>(keys_in[b]) & field);
    });
    std::vector<K> keys(static_cast<size_t>(n));
    std::vector<V> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      keys[i] = keys_in[order[i]];
      values[i] = values_in[order[i]];
    }
    std::copy(keys.begin(), keys.end(), keys_out);
    std::copy(values.begin(), values.end(), values_out);
    return cudaSuccess;
  }
};

}  // namespace cuda_emu
}  // namespace mt

namespace cub {
using DeviceRadixSort = ::mt::cuda_emu::DeviceRadixSort;
}  // namespace cub

#define threadIdx (::mt::cuda_emu::Current().thread_idx)
#define blockIdx (::mt::cuda_emu::Current().block_idx)
#define blockDim (::mt::cuda_emu::Current().block_dim)
#define gridDim (::mt::cuda_emu::Current().grid_dim)
#define warpSize 32

inline void __syncthreads() { ::mt::cuda_emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::mt::cuda_emu::SyncWarp(mask); }

namespace mt {
namespace cuda_emu {
// A shuffle's width: a power of two from 1 to 32.
inline int CheckedWidth(int width) {
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
    Fail("a shuffle's width %d is not a power of two from 1 to 32", width);
  }
  return width;
}
}  // namespace cuda_emu
}  // namespace mt

template <typename V>
V __shfl_xor_sync(unsigned mask, V v, int lane_mask, int width = 32) {
  const int lane = ::mt::cuda_emu::Current().linear % 32;
  const int src = lane ^ lane_mask;
  // A lane may read its own segment or an earlier one; a later segment gives its own value
  // (CUDA's rule).
  const int end = (lane / ::mt::cuda_emu::CheckedWidth(width) + 1) * width;
  const int from = src < end ? src : lane;
  return ::mt::cuda_emu::FromBits<V>(
      ::mt::cuda_emu::WarpExchange(mask, ::mt::cuda_emu::ToBits(v), from));
}
template <typename V>
V __shfl_sync(unsigned mask, V v, int src_lane, int width = 32) {
  const int lane = ::mt::cuda_emu::Current().linear % 32;
  const int w = ::mt::cuda_emu::CheckedWidth(width);
  const int from = (lane / w) * w + ((src_lane % w) + w) % w;
  return ::mt::cuda_emu::FromBits<V>(
      ::mt::cuda_emu::WarpExchange(mask, ::mt::cuda_emu::ToBits(v), from));
}
template <typename V>
V __shfl_down_sync(unsigned mask, V v, unsigned delta, int width = 32) {
  const int lane = ::mt::cuda_emu::Current().linear % 32;
  const int src = lane + static_cast<int>(delta);
  const int w = ::mt::cuda_emu::CheckedWidth(width);
  const int from = (src / w == lane / w) ? src : lane;
  return ::mt::cuda_emu::FromBits<V>(
      ::mt::cuda_emu::WarpExchange(mask, ::mt::cuda_emu::ToBits(v), from));
}

// Fibers never run concurrently, so a read-modify-write is atomic.
template <typename V>
V atomicMin(V* p, V v) {
  const V old = *p;
  if (v < old) *p = v;
  return old;
}
template <typename V>
V atomicMax(V* p, V v) {
  const V old = *p;
  if (v > old) *p = v;
  return old;
}
template <typename V>
V atomicAdd(V* p, V v) {
  const V old = *p;
  *p = old + v;
  return old;
}

// CUDA's math API has these in the global namespace, for float and double.
using std::isfinite;
using std::isinf;
using std::isnan;

// cuda_runtime.h's typed overload exists only under nvcc.
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

// Correctly rounded f32 arithmetic (the TU is compiled without contraction).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __expf(float a) { return std::exp(a); }
inline float __logf(float a) { return std::log(a); }
template <typename V>
V __ldg(const V* p) {
  return *p;
}

#endif  // MT_CORE_CUDA_EMU_EMU_H_
