// The heads permutations (core/ops/heads.h): one thread per element of the token-major tensor, so
// its reads (SplitQkv, SplitHeads) or writes (MergeQkv, MergeHeads) are contiguous, and the
// head-major side moves whole D-element rows.
#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace {

template <typename U>
__global__ void HeadsPermuteKernel(U* token_major, U* hm0, U* hm1, U* hm2, int64_t t, int64_t g,
                                   int64_t per_group, int64_t d, int64_t slots, bool to_heads,
                                   int64_t total) {
  for (int64_t i = GlobalThread(); i < total; i += GridStride()) {
    // i indexes token-major [B, T, G, slots, D].
    const int64_t col = i % d;
    int64_t rest = i / d;
    const int64_t slot = rest % slots;
    rest /= slots;
    const int64_t group = rest % g;
    const int64_t bt = rest / g;
    const int64_t b = bt / t;
    const int64_t pos = bt - b * t;
    const bool query = slot < per_group;
    U* hm = query ? hm0 : (slot == per_group ? hm1 : hm2);
    const int64_t heads = query ? g * per_group : g;
    const int64_t h = query ? group * per_group + slot : group;
    const int64_t j = ((b * heads + h) * t + pos) * d + col;  // Head-major [B, heads, T, D].
    if (to_heads) {
      hm[j] = token_major[i];
    } else {
      token_major[i] = hm[j];
    }
  }
}

template <typename U>
LaunchResult Launch(int64_t b, int64_t t, int64_t g, int64_t per_group, int64_t d, int64_t slots,
                    void* token_major, void* const head_major[3], bool to_heads,
                    cudaStream_t stream) {
  const int64_t total = b * t * g * d * slots;
  U* hm0 = static_cast<U*>(head_major[0]);
  U* hm1 = slots > per_group ? static_cast<U*>(head_major[1]) : hm0;
  U* hm2 = slots > per_group ? static_cast<U*>(head_major[2]) : hm0;
  MT_LAUNCH(GridFor(total), kThreads, 0, stream, HeadsPermuteKernel<U>)
  (static_cast<U*>(token_major), hm0, hm1, hm2, t, g, per_group, d, slots, to_heads, total);
  MT_CHECK_LAUNCH();
  return {};
}

}  // namespace

LaunchResult LaunchHeadsPermute(int elem_bytes, int64_t b, int64_t t, int64_t g, int64_t per_group,
                                int64_t d, int64_t slots, void* token_major,
                                void* const head_major[3], bool to_heads, void* stream) {
  if (b * t * g * d * slots == 0) return {};
  if (per_group < 1 || (slots != per_group && slots != per_group + 2)) {
    return LaunchResult{static_cast<int>(cudaErrorInvalidValue), __FILE__, __LINE__};
  }
  auto s = static_cast<cudaStream_t>(stream);
  switch (elem_bytes) {
    case 1:
      return Launch<uint8_t>(b, t, g, per_group, d, slots, token_major, head_major, to_heads, s);
    case 2:
      return Launch<uint16_t>(b, t, g, per_group, d, slots, token_major, head_major, to_heads, s);
    case 4:
      return Launch<uint32_t>(b, t, g, per_group, d, slots, token_major, head_major, to_heads, s);
    case 8:
      return Launch<uint64_t>(b, t, g, per_group, d, slots, token_major, head_major, to_heads, s);
    default:
      return LaunchResult{static_cast<int>(cudaErrorInvalidValue), __FILE__, __LINE__};
  }
}

}  // namespace cuda
}  // namespace mt
