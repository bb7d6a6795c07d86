// Embedding lookup (a row copy), its deterministic backward, and the device-side id check shared
// by the ops that take ids or targets.
//
// Backward without float atomics: the positions are sorted by table row with a stable radix sort
// (CUB), so each row's positions are contiguous and in increasing order; one thread per (row,
// column) then adds them in that order in f32, starting from dtable's value, and rounds once. This
// is the CPU kernel's summation order, so the two agree bit for bit.
#if !defined(MT_CUDA_EMULATION)  // The emulator (emu.h) has its own cub::DeviceRadixSort.
#include <cub/device/device_radix_sort.cuh>
#endif

#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace {

constexpr int64_t kIgnore = -100;  // ops::kIgnoreIndex

template <typename I>
__global__ void FindBadIdKernel(const I* ids, int64_t count, int64_t lo, int64_t hi,
                                bool allow_ignore, unsigned long long* first_bad) {
  for (int64_t i = GlobalThread(); i < count; i += GridStride()) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    if ((id < lo || id >= hi) && !(allow_ignore && id == kIgnore)) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));  // Integer: order-independent.
    }
  }
}

template <typename I, typename U>
__global__ void EmbeddingKernel(const I* ids, const U* table, U* out, int64_t n, int64_t v,
                                int64_t c, int64_t vocab_start) {
  const int64_t total = n * c;
  for (int64_t i = GlobalThread(); i < total; i += GridStride()) {
    const int64_t pos = i / c;
    const int64_t col = i - pos * c;
    const int64_t r = static_cast<int64_t>(ids[pos]) - vocab_start;
    out[i] = (r >= 0 && r < v) ? table[r * c + col] : U(0);  // All-zero bits are +0.
  }
}

// keys[n] = the local table row of ids[n], or v for ids outside the table; values[n] = n.
template <typename I>
__global__ void SortKeysKernel(const I* ids, int64_t n, int64_t v, int64_t vocab_start,
                               uint32_t* keys, int32_t* values) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const int64_t r = static_cast<int64_t>(ids[i]) - vocab_start;
    keys[i] = static_cast<uint32_t>((r >= 0 && r < v) ? r : v);
    values[i] = static_cast<int32_t>(i);
  }
}

// Block (s, column tile): if sorted position s starts a run of one table row, that row's columns
// accumulate every position of the run, in order.
template <typename T>
__global__ void AccumulateKernel(const uint32_t* keys, const int32_t* positions, const T* dout,
                                 T* dtable, int64_t n, int64_t v, int64_t c) {
  const int64_t s = blockIdx.x;
  const uint32_t row = keys[s];
  if (static_cast<int64_t>(row) >= v || (s > 0 && keys[s - 1] == row)) return;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (col >= c) return;
  T* dst = dtable + static_cast<int64_t>(row) * c + col;
  float acc = Load(dst);
  for (int64_t k = s; k < n && keys[k] == row; ++k) {
    acc += Load(dout + static_cast<int64_t>(positions[k]) * c + col);
  }
  Store(dst, acc);
}

// Bits that hold every key in [0, v].
int KeyBits(int64_t v) {
  int bits = 1;
  while ((int64_t{1} << bits) <= v) ++bits;
  return bits;
}

size_t Align(size_t n) { return (n + 255) / 256 * 256; }

// The CUB scratch for sorting n pairs (cudaSuccess on success).
cudaError_t SortTempBytes(int64_t n, int64_t v, size_t* bytes) {
  *bytes = 0;
  return cub::DeviceRadixSort::SortPairs(
      nullptr, *bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(n), 0,
      KeyBits(v));
}

}  // namespace

LaunchResult LaunchFindBadId(IdType id_type, const void* ids, int64_t count, int64_t lo, int64_t hi,
                             bool allow_ignore, unsigned long long* first_bad, void* stream) {
  if (count == 0) return {};
  return internal::DispatchId(id_type, [&](auto tag) -> LaunchResult {
    using I = typename decltype(tag)::type;
    MT_LAUNCH(GridFor(count), kThreads, 0, static_cast<cudaStream_t>(stream), FindBadIdKernel<I>)
    (static_cast<const I*>(ids), count, lo, hi, allow_ignore, first_bad);
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchEmbedding(IdType id_type, int elem_bytes, const void* ids, const void* table,
                             void* out, int64_t n, int64_t v, int64_t c, int64_t vocab_start,
                             void* stream) {
  if (n == 0 || c == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchId(id_type, [&](auto tag) -> LaunchResult {
    using I = typename decltype(tag)::type;
    const I* pids = static_cast<const I*>(ids);
    if (elem_bytes == 2) {
      MT_LAUNCH(GridFor(n * c), kThreads, 0, s, EmbeddingKernel<I, uint16_t>)
      (pids, static_cast<const uint16_t*>(table), static_cast<uint16_t*>(out), n, v, c,
       vocab_start);
    } else if (elem_bytes == 4) {
      MT_LAUNCH(GridFor(n * c), kThreads, 0, s, EmbeddingKernel<I, uint32_t>)
      (pids, static_cast<const uint32_t*>(table), static_cast<uint32_t*>(out), n, v, c,
       vocab_start);
    } else {
      return LaunchResult{static_cast<int>(cudaErrorInvalidValue), __FILE__, __LINE__};
    }
    MT_CHECK_LAUNCH();
    return {};
  });
}

size_t EmbeddingBackwardScratchBytes(int64_t n, int64_t v) {
  size_t temp = 0;
  if (n > 0 && SortTempBytes(n, v, &temp) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return 4 * Align(static_cast<size_t>(n) * sizeof(int32_t)) + Align(temp);
}

LaunchResult LaunchEmbeddingBackward(ElemType type, IdType id_type, const void* ids,
                                     const void* dout, void* dtable, int64_t n, int64_t v,
                                     int64_t c, int64_t vocab_start, void* scratch,
                                     size_t scratch_bytes, void* stream) {
  if (n == 0 || v == 0 || c == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  size_t temp_bytes = 0;
  MT_CHECK_CUDA_CALL(SortTempBytes(n, v, &temp_bytes));
  const size_t slot = Align(static_cast<size_t>(n) * sizeof(int32_t));
  if (scratch_bytes < 4 * slot + temp_bytes) {
    return LaunchResult{static_cast<int>(cudaErrorInvalidValue), __FILE__, __LINE__};
  }
  char* base = static_cast<char*>(scratch);
  uint32_t* keys_in = reinterpret_cast<uint32_t*>(base);
  uint32_t* keys_out = reinterpret_cast<uint32_t*>(base + slot);
  int32_t* values_in = reinterpret_cast<int32_t*>(base + 2 * slot);
  int32_t* values_out = reinterpret_cast<int32_t*>(base + 3 * slot);
  void* temp = base + 4 * slot;
  MT_RETURN_IF_LAUNCH_FAILED(internal::DispatchId(id_type, [&](auto tag) -> LaunchResult {
    using I = typename decltype(tag)::type;
    MT_LAUNCH(GridFor(n), kThreads, 0, s, SortKeysKernel<I>)
    (static_cast<const I*>(ids), n, v, vocab_start, keys_in, values_in);
    MT_CHECK_LAUNCH();
    return {};
  }));
  // LSD radix sort is stable: equal rows keep their positions in increasing order.
  MT_CHECK_CUDA_CALL(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, values_in,
                                                     values_out, static_cast<int>(n), 0, KeyBits(v),
                                                     s));
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((c + kThreads - 1) / kThreads));
    MT_LAUNCH(grid, kThreads, 0, s, AccumulateKernel<T>)
    (keys_out, values_out, static_cast<const T*>(dout), static_cast<T*>(dtable), n, v, c);
    MT_CHECK_LAUNCH();
    return {};
  });
}

}  // namespace cuda
}  // namespace mt
