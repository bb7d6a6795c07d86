// The CUDA emulator's kernel side and runtime: kernels written here (compiled as host C++, as the
// project's .cu files are under --config=cuda_emu) must compute what CUDA defines, and the
// mistakes a GPU would punish (races, divergent barriers, host pointers, out-of-bounds accesses)
// must stop the run or show in the results.
#include <cuda_runtime.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cuda/kernel_util.cuh"
#include "gtest/gtest.h"

namespace mt {
namespace cuda {
namespace {

// out[blockIdx.x] = sum of x[i] over the block's chunk, through BlockReduce (warp shuffles and
// __syncthreads).
__global__ void ChunkSumKernel(const float* x, int64_t n, int64_t chunk, float* out) {
  __shared__ float shared[32];
  float v = 0.0f;
  const int64_t begin = blockIdx.x * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) v += x[i];
  v = BlockReduce(v, SumOp(), 0.0f, shared);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}

// Every thread writes its flattened global id at that position.
__global__ void IndexKernel(int* out) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  out[block * threads + t] = block * threads + t;
}

__global__ void XorShuffleKernel(int* out, int lane_mask) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), lane_mask);
}

// Each thread stores its index in shared memory and reads its neighbour's: correct only with the
// barrier between the two.
__global__ void NeighbourKernel(float* out, bool sync) {
  MT_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  if (sync) __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// Half of the warp shuffles with the full mask while the other half waits at __syncthreads:
// each half waits for the other (a hang on a GPU).
__global__ void DivergentShuffleKernel(int* out) {
  int v = static_cast<int>(threadIdx.x);
  if (threadIdx.x < 16) {
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = v;
}

// Lanes 16..31 exit at once; lanes 0..15 shuffle among themselves with the full mask, which is
// valid CUDA (exited lanes do not hold a warp barrier back). 40 threads: the second warp has only
// 8 lanes, and its shuffles with the full mask are valid too.
__global__ void ExitedLanesKernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (lane >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

// Width 8: lanes read within their own group of 8 (xor 3 stays inside), and xor 8 would leave the
// group for a later one, which gives the lane's own value.
__global__ void WidthKernel(int* out, int lane_mask) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), lane_mask, 8);
}

__global__ void WriteKernel(float* p, int64_t i) { p[i] = 1.0f; }

__global__ void SharedBytesKernel(float* out) {
  MT_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

template <typename T>
T* DeviceAlloc(size_t count) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, count * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> ToHost(const T* d, size_t count) {
  std::vector<T> h(count);
  EXPECT_EQ(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Runs fn once with the threads of each block in order and once in reverse.
template <typename Fn>
void BothOrders(Fn fn) {
  for (const char* order : {"0", "1"}) {
    setenv("MT_CUDA_EMU_REVERSE", order, 1);
    fn(order);
  }
  unsetenv("MT_CUDA_EMU_REVERSE");
}

TEST(CudaEmulatorTest, BlockReduceMatchesFloat64Sum) {
  const int64_t n = 1000, chunk = 337, blocks = 3;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.1 * static_cast<double>(i)) + 0.25f;
  float* dx = DeviceAlloc<float>(n);
  float* dout = DeviceAlloc<float>(blocks);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  BothOrders([&](const char* order) {
    for (int threads : {32, 96, 256}) {
      MT_LAUNCH(static_cast<unsigned>(blocks), threads, 0, nullptr, ChunkSumKernel)
      (dx, n, chunk, dout);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      const std::vector<float> out = ToHost(dout, blocks);
      for (int64_t b = 0; b < blocks; ++b) {
        double want = 0.0;
        for (int64_t i = b * chunk; i < std::min(n, (b + 1) * chunk); ++i) want += x[i];
        EXPECT_NEAR(out[b], want, 1e-4 * chunk)
            << "block " << b << " threads " << threads << " reverse " << order;
      }
    }
  });
  cudaFree(dx);
  cudaFree(dout);
}

TEST(CudaEmulatorTest, ThreeDimensionalIndicesCoverTheGridOnce) {
  const dim3 grid(3, 2, 2), block(5, 3, 2);
  const int total = 3 * 2 * 2 * 5 * 3 * 2;
  int* d = DeviceAlloc<int>(total);
  MT_LAUNCH(grid, block, 0, nullptr, IndexKernel)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> out = ToHost(d, total);
  for (int i = 0; i < total; ++i) EXPECT_EQ(out[i], i);
  cudaFree(d);
}

TEST(CudaEmulatorTest, XorShuffleSwapsLanes) {
  int* d = DeviceAlloc<int>(64);
  for (int mask : {1, 5, 16, 31}) {
    MT_LAUNCH(2, 64, 0, nullptr, XorShuffleKernel)(d, mask);
    const std::vector<int> out = ToHost(d, 64);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], i ^ mask) << "mask " << mask;
  }
  cudaFree(d);
}

TEST(CudaEmulatorTest, ExitedLanesDoNotHoldAWarpBack) {
  int* d = DeviceAlloc<int>(40);
  MT_LAUNCH(1, 40, 0, nullptr, ExitedLanesKernel)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> out = ToHost(d, 40);
  for (int i : {0, 1, 14, 15, 32, 33, 38, 39}) EXPECT_EQ(out[i], i ^ 1) << i;
  cudaFree(d);
}

TEST(CudaEmulatorTest, ShuffleWidthFollowsCudasRule) {
  int* d = DeviceAlloc<int>(32);
  MT_LAUNCH(1, 32, 0, nullptr, WidthKernel)(d, 3);
  std::vector<int> out = ToHost(d, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], i ^ 3) << i;
  MT_LAUNCH(1, 32, 0, nullptr, WidthKernel)(d, 8);
  out = ToHost(d, 32);
  // Lane i reads lane i ^ 8: allowed when that is an earlier group, else its own value.
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], (i ^ 8) < i ? (i ^ 8) : i) << i;
  cudaFree(d);
}

TEST(CudaEmulatorTest, MissingBarrierShowsInTheResults) {
  const int threads = 64;
  float* d = DeviceAlloc<float>(threads);
  BothOrders([&](const char* order) {
    MT_LAUNCH(1, threads, threads * sizeof(float), nullptr, NeighbourKernel)(d, true);
    std::vector<float> out = ToHost(d, threads);
    for (int i = 0; i < threads; ++i) EXPECT_EQ(out[i], (i + 1) % threads) << order;
  });
  // Without the barrier, in-order threads read neighbours that have not written yet (shared
  // memory starts as NaN), and reverse-order threads read the last value written.
  setenv("MT_CUDA_EMU_REVERSE", "0", 1);
  MT_LAUNCH(1, threads, threads * sizeof(float), nullptr, NeighbourKernel)(d, false);
  std::vector<float> out = ToHost(d, threads);
  EXPECT_TRUE(std::isnan(out[0]));
  unsetenv("MT_CUDA_EMU_REVERSE");
  cudaFree(d);
}

TEST(CudaEmulatorTest, LaunchLimitsAreAGpusLimits) {
  float* d = DeviceAlloc<float>(1024);
  MT_LAUNCH(1, 2048, 0, nullptr, WriteKernel)(d, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // Read once, then cleared.
  MT_LAUNCH(0, 32, 0, nullptr, WriteKernel)(d, 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);

  // Above 48 KiB of dynamic shared memory a kernel must opt in, up to 227 KiB.
  const size_t big = 64 * 1024;
  MT_LAUNCH(1, 32, big, nullptr, SharedBytesKernel)(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(SharedBytesKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 * 1024),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // Runtime errors are recorded too.
  ASSERT_EQ(cudaFuncSetAttribute(SharedBytesKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(big)),
            cudaSuccess);
  MT_LAUNCH(1, 32, big, nullptr, SharedBytesKernel)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(ToHost(d, 32)[5], 2.0f);
  cudaFree(d);
}

TEST(CudaEmulatorTest, FreshDeviceMemoryIsNotZero) {
  float* d = DeviceAlloc<float>(7);
  for (float v : ToHost(d, 7)) EXPECT_TRUE(std::isnan(v));
  cudaFree(d);
}

TEST(CudaEmulatorTest, RadixSortIsStableOnTheKeyBits) {
  const std::vector<uint32_t> keys = {5, 3, 5, 1, 3, 0x105, 2};
  const std::vector<int32_t> values = {0, 1, 2, 3, 4, 5, 6};
  const int n = static_cast<int>(keys.size());
  uint32_t* dk = DeviceAlloc<uint32_t>(2 * n);
  int32_t* dv = DeviceAlloc<int32_t>(2 * n);
  cudaMemcpy(dk, keys.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, values.data(), n * 4, cudaMemcpyHostToDevice);
  size_t temp_bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, dk, dk + n, dv, dv + n, n, 0, 8),
            cudaSuccess);
  void* temp = DeviceAlloc<char>(temp_bytes);
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, dk + n, dv, dv + n, n, 0, 8),
            cudaSuccess);
  // Only bits [0, 8) count, so 0x105 sorts with the 5s, after them (stable).
  EXPECT_EQ(ToHost(dk + n, n), (std::vector<uint32_t>{1, 2, 3, 3, 5, 5, 0x105}));
  EXPECT_EQ(ToHost(dv + n, n), (std::vector<int32_t>{3, 6, 1, 4, 0, 2, 5}));
  cudaFree(temp);
  cudaFree(dk);
  cudaFree(dv);
}

TEST(CudaEmulatorDeathTest, ShuffleMissingLanesStops) {
  int* d = DeviceAlloc<int>(32);
  EXPECT_DEATH(MT_LAUNCH(1, 32, 0, nullptr, DivergentShuffleKernel)(d),
               "DivergentShuffleKernel.*never arrives.*is at __syncthreads");
  cudaFree(d);
}

TEST(CudaEmulatorDeathTest, HostPointerArgumentStops) {
  std::vector<float> host(4);
  EXPECT_DEATH(MT_LAUNCH(1, 1, 0, nullptr, WriteKernel)(host.data(), 0),
               "WriteKernel: argument 0 .* not in device memory");
}

// Host code faults on device memory, and kernels and copies still reach it, with protection
// keys (where the CPU has them) and with the mprotect fallback, which opens an allocation on its
// first touch inside a launch or copy and closes it when that ends: the host write faults on the
// allocation two launches and a copy touched (`touched`) and on one nothing touched. Each mode
// runs in a child process (the mode is read once per process).
void HostAccessFaultsButDeviceAccessWorks(const char* mode, bool touched) {
  setenv("MT_CUDA_EMU_PROTECT", mode, 1);
  float* d = DeviceAlloc<float>(4);
  float* untouched = DeviceAlloc<float>(4);
  MT_LAUNCH(1, 1, 0, nullptr, WriteKernel)(d, 2);
  MT_LAUNCH(1, 1, 0, nullptr, WriteKernel)(d, 3);
  float x[2] = {0.0f, 0.0f};
  cudaMemcpy(x, d + 2, sizeof(x), cudaMemcpyDeviceToHost);
  if (x[0] != 1.0f || x[1] != 1.0f) std::abort();
  std::fprintf(stderr, "device access works\n");
  *reinterpret_cast<volatile float*>(touched ? d : untouched) = 1.0f;  // Faults.
  std::fprintf(stderr, "host access works\n");
  std::exit(0);
}

TEST(CudaEmulatorDeathTest, HostCodeCannotTouchDeviceMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (bool touched : {true, false}) {
    EXPECT_EXIT(HostAccessFaultsButDeviceAccessWorks("key", touched),
                ::testing::KilledBySignal(SIGSEGV), "device access works");
    EXPECT_EXIT(HostAccessFaultsButDeviceAccessWorks("mprotect", touched),
                ::testing::KilledBySignal(SIGSEGV), "device access works");
    // The control: without protection the same host write goes through.
    EXPECT_EXIT(HostAccessFaultsButDeviceAccessWorks("0", touched), ::testing::ExitedWithCode(0),
                "host access works");
  }
}

// A SIGSEGV sent to the process (no access to retry) still ends it under the mprotect fallback's
// handler, inside and outside a launch.
void SentSegvEndsTheProcess() {
  setenv("MT_CUDA_EMU_PROTECT", "mprotect", 1);
  float* d = DeviceAlloc<float>(4);  // Installs the handler.
  MT_LAUNCH(1, 1, 0, nullptr, WriteKernel)(d, 0);
  std::fprintf(stderr, "handler installed\n");
  raise(SIGSEGV);
  std::fprintf(stderr, "survived\n");
  std::exit(0);
}

TEST(CudaEmulatorDeathTest, SentSegvEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(SentSegvEndsTheProcess(), ::testing::KilledBySignal(SIGSEGV), "handler installed");
}

TEST(CudaEmulatorDeathTest, OutOfBoundsWriteFaults) {
  float* d = DeviceAlloc<float>(1024);  // 4096 bytes: the guard page follows at once.
  MT_LAUNCH(1, 1, 0, nullptr, WriteKernel)(d, 1023);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_DEATH(MT_LAUNCH(1, 1, 0, nullptr, WriteKernel)(d, 1024), "");
  cudaFree(d);
}

TEST(CudaEmulatorDeathTest, CopyPastTheAllocationStops) {
  float* d = DeviceAlloc<float>(8);
  std::vector<float> host(9);
  EXPECT_DEATH(cudaMemcpy(host.data(), d, 9 * sizeof(float), cudaMemcpyDeviceToHost),
               "runs past its allocation");
  EXPECT_DEATH(cudaMemcpy(d, host.data(), 4, cudaMemcpyDeviceToHost), "not of the kind");
  cudaFree(d);
}

}  // namespace
}  // namespace cuda
}  // namespace mt
