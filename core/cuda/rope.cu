// Rotary position embedding: one thread per (position, pair), which computes its angle's cos and
// sin once in double (rounded to f32, as the CPU table) and rotates that pair in every row of its
// grid-y slice of the outer (batch x head) dimension.
#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace {

template <typename T>
__global__ void RopeKernel(const T* x, T* y, RopeParams p) {
  const int64_t half = p.head_dim / 2;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (pair >= p.seq * half) return;
  const int64_t t = pair / half, i = pair % half;
  const double theta = pow(p.base, -2.0 * static_cast<double>(i) / static_cast<double>(p.head_dim));
  const double angle = static_cast<double>(p.position_offset + t) * theta;
  const float c = static_cast<float>(cos(angle));
  const float s = p.sign * static_cast<float>(sin(angle));
  for (int64_t o = blockIdx.y; o < p.outer; o += gridDim.y) {
    const int64_t at = (o * p.seq + t) * p.head_dim + i;
    // Both elements are read before either is written: y may alias x.
    const float u = Load(x + at), v = Load(x + at + half);
    Store(y + at, u * c - v * s);
    Store(y + at + half, v * c + u * s);
  }
}

}  // namespace

LaunchResult LaunchRope(ElemType type, const void* x, void* y, const RopeParams& params,
                        void* stream) {
  const int64_t pairs = params.seq * (params.head_dim / 2);
  if (pairs == 0 || params.outer == 0) return {};
  // Enough blocks to fill a GPU; past that, each thread loops over more outer rows (reusing its
  // cos and sin).
  constexpr int64_t kTargetBlocks = 2048;
  constexpr int64_t kMaxGridY = 65535;
  const int64_t blocks_x = (pairs + kThreads - 1) / kThreads;
  int64_t blocks_y = (kTargetBlocks + blocks_x - 1) / blocks_x;
  if (blocks_y > params.outer) blocks_y = params.outer;
  if (blocks_y > kMaxGridY) blocks_y = kMaxGridY;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y));
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    MT_LAUNCH(grid, kThreads, 0, s, RopeKernel<T>)
    (static_cast<const T*>(x), static_cast<T*>(y), params);
    MT_CHECK_LAUNCH();
    return {};
  });
}

}  // namespace cuda
}  // namespace mt
