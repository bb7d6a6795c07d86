// Fused attention (core/ops/attention.h) without a [tq, tk] buffer: tiles of 32 keys in shared
// memory, math in f32, an online softmax (running maximum and sum) in the forward. The backward
// recomputes the probabilities from the saved log-sum-exp in two kernels that own their outputs
// (no atomics, deterministic): dk and dv per key tile, dq per query tile, as the CPU kernels in
// core/ops/attention_cpu.cc do. Dropout draws the mask of ops::Dropout through core/philox.h.
#include <climits>
#include <cmath>

#include "core/cuda/kernel_util.cuh"
#include "core/philox.h"

namespace mt {
namespace cuda {
namespace {

// Forward: a block of kFwdWarps warps holds kFwdRows query rows, kRowsPerWarp per warp; each
// lane owns one key of a tile (scores) and the head-dim columns lane + 32 c (accumulators).
constexpr int kFwdWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kFwdRows = kFwdWarps * kRowsPerWarp;
constexpr int kFwdThreads = kFwdWarps * kWarp;
constexpr int kKeys = kWarp;
constexpr int kMaxDPerLane = static_cast<int>(kAttentionMaxHeadDim) / kWarp;
// Dynamic shared memory above this needs cudaFuncAttributeMaxDynamicSharedMemorySize.
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// Keys [0, KeyEnd(i)) pass the causal mask for query i (Softmax's rule).
__device__ __forceinline__ int64_t KeyEnd(const AttentionParams& a, int64_t i) {
  if (!a.causal) return a.tk;
  const int64_t e = i + (a.tk - a.tq) + 1;
  return e < 0 ? 0 : (e > a.tk ? a.tk : e);
}

__device__ __forceinline__ bool Visible(const int32_t* mask_row, int64_t kend, int64_t j) {
  return j < kend && (mask_row == nullptr || mask_row[j] != 0);
}

// The (batch, key/value head) pair of k and v that the (batch, query head) pair bh reads.
__device__ __forceinline__ int64_t KvHead(const AttentionParams& a, int64_t bh) {
  return (bh / a.heads) * a.groups + (bh % a.heads) / (a.heads / a.groups);
}

__device__ __forceinline__ const int32_t* MaskRow(const AttentionParams& a, int64_t bh) {
  return a.padding_mask == nullptr ? nullptr : a.padding_mask + (bh / a.heads) * a.tk;
}

// What dropout multiplies probability element i (linear in [batch_heads, tq, tk]) by: 0 or
// 1 / (1 - p). The key is ops::DropoutKey (host-only, core/ops/elementwise.h), the draw
// PhiloxUniform, so the decision is bitwise that of ops::Dropout.
__device__ __forceinline__ float DropFactor(const DropoutParams& p, int64_t i) {
  const int64_t key = p.key_inner <= 0
                          ? p.key_base + i
                          : p.key_base + (i / p.key_inner) * p.key_outer_stride + i % p.key_inner;
  return PhiloxUniform(p.seed, p.stream_id, static_cast<uint64_t>(key)) >= p.p ? p.scale : 0.0f;
}

// ---- Forward ----

size_t ForwardSharedBytes(int d) {
  // q rows [kFwdRows][d], keys [kKeys][d + 1] (padded: lane j reads row j), values [kKeys][d],
  // each warp's probabilities [kFwdWarps][kKeys].
  return sizeof(float) *
         (static_cast<size_t>(kFwdRows) * d + kKeys * (d + 1) + kKeys * d + kFwdWarps * kKeys);
}

// A query row's running state in the forward: the maximum score m and the sum l of exp(s - m)
// over the keys seen so far, and this lane's columns lane + 32 c of sum_j exp(s_j - m) v_j.
struct OnlineRow {
  float m;
  float l;
  float acc[kMaxDPerLane];
};

__device__ __forceinline__ void StartRow(OnlineRow* row) {
  row->m = -INFINITY;
  row->l = 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxDPerLane; ++c) row->acc[c] = 0.0f;
}

// The block's query rows [0, rows) of qb [rows, D] into qs [kFwdRows][D], zero below them.
template <typename T>
__device__ __forceinline__ void StageQueryTile(const T* qb, int rows, int D, float* qs) {
  for (int e = threadIdx.x; e < kFwdRows * D; e += blockDim.x) {
    qs[e] = e / D < rows ? Load(qb + e) : 0.0f;
  }
}

// Keys and values [0, n) of a tile (kb, vb [n, D]) into ks [kKeys][D + 1] (padded: lane j reads
// row j) and vs [kKeys][D], zero below them.
template <typename T>
__device__ __forceinline__ void StageKeyValueTile(const T* kb, const T* vb, int n, int D, float* ks,
                                                  float* vs) {
  for (int e = threadIdx.x; e < kKeys * D; e += blockDim.x) {
    const int jj = e / D;
    ks[jj * (D + 1) + e % D] = jj < n ? Load(kb + e) : 0.0f;
    vs[e] = jj < n ? Load(vb + e) : 0.0f;
  }
}

// This lane's score scale (q_i . k_j) for key j = j0 + lane of a tile of n keys (ks, as staged);
// -inf where the key is past the tile or masked.
__device__ __forceinline__ float LaneScore(const AttentionParams& a, const float* qr,
                                           const float* ks, int n, int D, const int32_t* mask_row,
                                           int64_t kend, int64_t j) {
  const int lane = threadIdx.x % kWarp;
  if (lane >= n || !Visible(mask_row, kend, j)) return -INFINITY;
  const float* kr = ks + lane * (D + 1);
  float dot = 0.0f;
  for (int d = 0; d < D; ++d) dot += qr[d] * kr[d];
  return a.scale * dot;
}

// Folds one key tile into a row's state, given each lane's score s (all 32 lanes of the warp):
// the online softmax rescales what was summed by exp(m_old - m_new), then adds the tile's
// probabilities (dropped, under dropout; drop_index is this lane's element of the probabilities)
// times the values vs [kKeys][D], through pw, the warp's [kKeys] scratch.
__device__ __forceinline__ void AddKeyTile(const AttentionParams& a, float s, int64_t drop_index,
                                           int n, int D, const float* vs, float* pw,
                                           OnlineRow* row) {
  const int lane = threadIdx.x % kWarp;
  const float tile_max = WarpReduce(s, MaxOp());
  if (tile_max == -INFINITY) return;  // Nothing visible here (or every score -inf).
  const float m_new = fmaxf(row->m, tile_max);
  const float alpha = expf(row->m - m_new);  // 0 for the first visible tile.
  float p = s == -INFINITY ? 0.0f : expf(s - m_new);
  row->l = row->l * alpha + WarpReduce(p, SumOp());
  row->m = m_new;
  if (a.dropout.p > 0.0f && p != 0.0f) p *= DropFactor(a.dropout, drop_index);
  pw[lane] = p;
  __syncwarp();
#pragma unroll
  for (int c = 0; c < kMaxDPerLane; ++c) {
    const int d = lane + c * kWarp;
    if (d < D) {
      float x = row->acc[c] * alpha;
      for (int jj = 0; jj < n; ++jj) x += pw[jj] * vs[jj * D + d];
      row->acc[c] = x;
    }
  }
  __syncwarp();  // pw is rewritten by the next row.
}

// The finished row: out_row [D] = acc / l (this lane's columns), and (lane 0) its log-sum-exp;
// l = 0 means nothing was visible: the row is zero and lse -inf.
template <typename T>
__device__ __forceinline__ void StoreRow(const OnlineRow& row, int D, T* out_row, float* lse_row) {
  const int lane = threadIdx.x % kWarp;
  const float inv = row.l > 0.0f ? 1.0f / row.l : 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxDPerLane; ++c) {
    const int d = lane + c * kWarp;
    if (d < D) Store(out_row + d, row.acc[c] * inv);
  }
  if (lane == 0) *lse_row = row.l > 0.0f ? row.m + logf(row.l) : -INFINITY;
}

// One block per (bh, tile of kFwdRows query rows); the key tiles pass through shared memory.
template <typename T>
__global__ void __launch_bounds__(kFwdThreads)
    AttentionForwardKernel(const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse,
                           AttentionParams a, int64_t q_tiles) {
  MT_DYNAMIC_SHARED(float, smem);
  const int D = static_cast<int>(a.d);
  float* qs = smem;
  float* ks = qs + kFwdRows * D;
  float* vs = ks + kKeys * (D + 1);
  float* ps = vs + kKeys * D;
  const int64_t bh = blockIdx.x / q_tiles;
  const int64_t i0 = (blockIdx.x % q_tiles) * kFwdRows;
  const int rows = static_cast<int>(a.tq - i0 < kFwdRows ? a.tq - i0 : kFwdRows);
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int32_t* mask_row = MaskRow(a, bh);

  StageQueryTile(q + (bh * a.tq + i0) * D, rows, D, qs);
  OnlineRow state[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) StartRow(&state[rr]);
  // No row of the tile sees a key at or after kmax.
  const int64_t kmax = KeyEnd(a, i0 + rows - 1);
  for (int64_t j0 = 0; j0 < kmax; j0 += kKeys) {
    const int n = static_cast<int>(kmax - j0 < kKeys ? kmax - j0 : kKeys);
    __syncthreads();  // qs is written (first tile); nobody reads the previous tile any more.
    const int64_t kv_at = (KvHead(a, bh) * a.tk + j0) * D;
    StageKeyValueTile(k + kv_at, v + kv_at, n, D, ks, vs);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      // Every condition that skips a row is uniform across the warp, so the shuffles in
      // AddKeyTile see all 32 lanes.
      const int r = warp * kRowsPerWarp + rr;
      if (r >= rows) continue;
      const int64_t i = i0 + r;
      const int64_t kend = KeyEnd(a, i);
      if (kend <= j0) continue;
      const int64_t j = j0 + lane;
      const float s = LaneScore(a, qs + r * D, ks, n, D, mask_row, kend, j);
      AddKeyTile(a, s, (bh * a.tq + i) * a.tk + j, n, D, vs, ps + warp * kKeys, &state[rr]);
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp * kRowsPerWarp + rr;
    if (r >= rows) continue;
    const int64_t row = bh * a.tq + i0 + r;
    StoreRow(state[rr], D, out + row * D, lse + row);
  }
}

// ---- Backward ----

// For query row i (q row qr, dout row dor, D_i = dout_i . out_i) and visible key j (rows kr, vr):
// the dropped probability *pd (what multiplied v_j) and *ds, the gradient of q_i . k_j.
__device__ __forceinline__ void ProbAndGrad(const AttentionParams& a, const float* qr,
                                            const float* dor, const float* kr, const float* vr,
                                            int D, float lse_i, float d_i, int64_t i, int64_t j,
                                            int64_t bh, float* pd, float* ds) {
  float s = 0.0f, dp = 0.0f;
  for (int d = 0; d < D; ++d) {
    s += qr[d] * kr[d];
    dp += dor[d] * vr[d];
  }
  // P <= 1: the clamp absorbs the rounding of a recomputed score above lse (as on the CPU).
  const float prob = expf(fminf(a.scale * s - lse_i, 0.0f));
  const float factor =
      a.dropout.p > 0.0f ? DropFactor(a.dropout, (bh * a.tq + i) * a.tk + j) : 1.0f;
  *pd = prob * factor;
  *ds = a.scale * prob * (dp * factor - d_i);
}

// Adds the terms of query head bh (rows i_start .. tq) to this lane's key j (of the n keys of the
// tile in ks, vs) in dks and dvs, through the rows qrow and dorow [D] of shared memory.
template <typename T>
__device__ __forceinline__ void AccumulateQueryHead(
    const AttentionParams& a, const T* __restrict__ q, const T* __restrict__ out,
    const T* __restrict__ dout, const float* __restrict__ lse, int64_t bh, int64_t i_start,
    int64_t j, int n, const int32_t* mask_row, const float* ks, const float* vs, float* qrow,
    float* dorow, float* dks, float* dvs) {
  const int D = static_cast<int>(a.d);
  const int P = D + 1;
  const int lane = threadIdx.x;
  for (int64_t i = i_start; i < a.tq; ++i) {
    const int64_t row = bh * a.tq + i;
    const float lse_i = lse[row];
    if (lse_i == -INFINITY) continue;  // A row that sees nothing (uniform).
    float part = 0.0f;
    for (int d = lane; d < D; d += kWarp) {
      const float dov = Load(dout + row * D + d);
      qrow[d] = Load(q + row * D + d);
      dorow[d] = dov;
      part += dov * Load(out + row * D + d);
    }
    const float d_i = WarpReduce(part, SumOp());
    __syncwarp();
    if (lane < n && Visible(mask_row, KeyEnd(a, i), j)) {
      float pd, ds;
      ProbAndGrad(a, qrow, dorow, ks + lane * P, vs + lane * P, D, lse_i, d_i, i, j, bh, &pd, &ds);
      float* dkr = dks + lane * P;
      float* dvr = dvs + lane * P;
      for (int d = 0; d < D; ++d) {
        dvr[d] += pd * dorow[d];
        dkr[d] += ds * qrow[d];
      }
    }
    __syncwarp();  // qrow and dorow are rewritten by the next row.
  }
}

size_t KeyGradSharedBytes(int d) {
  // k, v, dk, dv tiles [kKeys][d + 1] (lane j owns row j) and one q and dout row [d].
  return sizeof(float) * (4 * static_cast<size_t>(kKeys) * (d + 1) + 2 * d);
}

// One warp per (bg, key tile) of a (batch, key/value head) pair bg: lane jj accumulates dk and dv
// of key j0 + jj over the group's query heads in order and, in each, over the query rows that see
// the tile, in increasing order.
template <typename T>
__global__ void __launch_bounds__(kWarp)
    AttentionKeyGradKernel(const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, const T* __restrict__ out,
                           const T* __restrict__ dout, const float* __restrict__ lse,
                           T* __restrict__ dk, T* __restrict__ dv, AttentionParams a,
                           int64_t k_tiles) {
  MT_DYNAMIC_SHARED(float, smem);
  const int D = static_cast<int>(a.d);
  const int P = D + 1;
  float* ks = smem;
  float* vs = ks + kKeys * P;
  float* dks = vs + kKeys * P;
  float* dvs = dks + kKeys * P;
  float* qrow = dvs + kKeys * P;
  float* dorow = qrow + D;
  const int64_t bg = blockIdx.x / k_tiles;
  const int64_t j0 = (blockIdx.x % k_tiles) * kKeys;
  const int n = static_cast<int>(a.tk - j0 < kKeys ? a.tk - j0 : kKeys);
  const int lane = threadIdx.x;
  const int64_t per_group = a.heads / a.groups;
  // The group's query heads: bh = b NH + g per_group + r.
  const int64_t first_bh = (bg / a.groups) * a.heads + (bg % a.groups) * per_group;
  const int32_t* mask_row = MaskRow(a, first_bh);
  const T* kb = k + (bg * a.tk + j0) * D;
  const T* vb = v + (bg * a.tk + j0) * D;
  for (int e = lane; e < kKeys * D; e += kWarp) {
    const int jj = e / D, at = jj * P + e % D;
    ks[at] = jj < n ? Load(kb + e) : 0.0f;
    vs[at] = jj < n ? Load(vb + e) : 0.0f;
    dks[at] = 0.0f;
    dvs[at] = 0.0f;
  }
  __syncwarp();
  const int64_t j = j0 + lane;
  int64_t i_start = 0;  // Rows before it see none of the tile (causal).
  if (a.causal) {
    i_start = j0 - (a.tk - a.tq);
    i_start = i_start < 0 ? 0 : (i_start > a.tq ? a.tq : i_start);
  }
  for (int64_t bh = first_bh; bh < first_bh + per_group; ++bh) {
    AccumulateQueryHead(a, q, out, dout, lse, bh, i_start, j, n, mask_row, ks, vs, qrow, dorow, dks,
                        dvs);
  }
  T* dkb = dk + (bg * a.tk + j0) * D;
  T* dvb = dv + (bg * a.tk + j0) * D;
  for (int e = lane; e < n * D; e += kWarp) {
    const int at = (e / D) * P + e % D;
    Store(dkb + e, dks[at]);
    Store(dvb + e, dvs[at]);
  }
}

size_t QueryGradSharedBytes(int d) {
  // q, dout, dq rows [kWarp][d + 1] (lane r owns row r) and a k and v tile [kKeys][d].
  return sizeof(float) * (3 * static_cast<size_t>(kWarp) * (d + 1) + 2 * kKeys * d);
}

// One warp per (bh, tile of 32 query rows): lane r accumulates dq of row i0 + r over the keys
// it sees, in increasing order.
template <typename T>
__global__ void __launch_bounds__(kWarp)
    AttentionQueryGradKernel(const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, const T* __restrict__ out,
                             const T* __restrict__ dout, const float* __restrict__ lse,
                             T* __restrict__ dq, AttentionParams a, int64_t q_tiles) {
  MT_DYNAMIC_SHARED(float, smem);
  const int D = static_cast<int>(a.d);
  const int P = D + 1;
  float* qs = smem;
  float* dos = qs + kWarp * P;
  float* dqs = dos + kWarp * P;
  float* kt = dqs + kWarp * P;
  float* vt = kt + kKeys * D;
  const int64_t bh = blockIdx.x / q_tiles;
  const int64_t i0 = (blockIdx.x % q_tiles) * kWarp;
  const int rows = static_cast<int>(a.tq - i0 < kWarp ? a.tq - i0 : kWarp);
  const int lane = threadIdx.x;
  const int32_t* mask_row = MaskRow(a, bh);
  float d_mine = 0.0f;  // D_i of this lane's row.
  for (int r = 0; r < kWarp; ++r) {
    const int64_t row = bh * a.tq + i0 + r;
    float part = 0.0f;
    for (int d = lane; d < D; d += kWarp) {
      float qv = 0.0f, dov = 0.0f;
      if (r < rows) {
        qv = Load(q + row * D + d);
        dov = Load(dout + row * D + d);
        part += dov * Load(out + row * D + d);
      }
      qs[r * P + d] = qv;
      dos[r * P + d] = dov;
      dqs[r * P + d] = 0.0f;
    }
    const float d_r = WarpReduce(part, SumOp());
    if (lane == r) d_mine = d_r;
  }
  const int64_t i = i0 + lane;
  const float lse_i = lane < rows ? lse[bh * a.tq + i] : -INFINITY;
  const bool live = lse_i != -INFINITY;  // A real row that sees something.
  const int64_t kend = live ? KeyEnd(a, i) : 0;
  const int64_t kmax = KeyEnd(a, i0 + rows - 1);
  for (int64_t j0 = 0; j0 < kmax; j0 += kKeys) {
    const int n = static_cast<int>(kmax - j0 < kKeys ? kmax - j0 : kKeys);
    __syncwarp();  // The rows are written (first tile); the previous tile is no longer read.
    const T* kb = k + (KvHead(a, bh) * a.tk + j0) * D;
    const T* vb = v + (KvHead(a, bh) * a.tk + j0) * D;
    for (int e = lane; e < kKeys * D; e += kWarp) {
      const bool in = e / D < n;
      kt[e] = in ? Load(kb + e) : 0.0f;
      vt[e] = in ? Load(vb + e) : 0.0f;
    }
    __syncwarp();
    if (!live) continue;
    float* dqr = dqs + lane * P;
    for (int jj = 0; jj < n; ++jj) {
      const int64_t j = j0 + jj;
      if (!Visible(mask_row, kend, j)) continue;
      float pd, ds;
      ProbAndGrad(a, qs + lane * P, dos + lane * P, kt + jj * D, vt + jj * D, D, lse_i, d_mine, i,
                  j, bh, &pd, &ds);
      if (ds == 0.0f) continue;
      for (int d = 0; d < D; ++d) dqr[d] += ds * kt[jj * D + d];
    }
  }
  __syncwarp();
  T* dqb = dq + (bh * a.tq + i0) * D;
  for (int e = lane; e < rows * D; e += kWarp) Store(dqb + e, dqs[(e / D) * P + e % D]);
}

// Blocks for batch_heads * tiles (batch_heads: pairs of batch and query or key/value head), or 0
// when that does not fit a grid.
unsigned GridBlocks(int64_t batch_heads, int64_t tiles) {
  const int64_t blocks = batch_heads * tiles;
  return blocks > INT_MAX ? 0u : static_cast<unsigned>(blocks);
}

// Allows `bytes` of dynamic shared memory for `kernel` when above the default.
template <typename Kernel>
LaunchResult AllowShared(Kernel kernel, size_t bytes) {
  if (bytes > kDefaultSharedBytes) {
    MT_CHECK_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
  }
  return {};
}

LaunchResult InvalidValue(int line) {
  return LaunchResult{static_cast<int>(cudaErrorInvalidValue), __FILE__, line};
}

}  // namespace

LaunchResult LaunchFusedAttention(ElemType type, const void* q, const void* k, const void* v,
                                  void* out, float* lse, const AttentionParams& params,
                                  void* stream) {
  if (params.batch_heads == 0 || params.tq == 0) return {};
  if (params.d < 0 || params.d > kAttentionMaxHeadDim || params.heads < 1 || params.groups < 1 ||
      params.heads % params.groups != 0) {
    return InvalidValue(__LINE__);
  }
  const int64_t q_tiles = (params.tq + kFwdRows - 1) / kFwdRows;
  const unsigned blocks = GridBlocks(params.batch_heads, q_tiles);
  if (blocks == 0) return InvalidValue(__LINE__);
  const int d = static_cast<int>(params.d);
  const size_t shared = ForwardSharedBytes(d);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    MT_RETURN_IF_LAUNCH_FAILED(AllowShared(AttentionForwardKernel<T>, shared));
    MT_LAUNCH(blocks, kFwdThreads, shared, static_cast<cudaStream_t>(stream),
              AttentionForwardKernel<T>)
    (static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
     static_cast<T*>(out), lse, params, q_tiles);
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchFusedAttentionBackward(ElemType type, const void* q, const void* k,
                                          const void* v, const void* out, const void* dout,
                                          const float* lse, void* dq, void* dk, void* dv,
                                          const AttentionParams& params, void* stream) {
  if (params.batch_heads == 0) return {};
  if (params.d < 0 || params.d > kAttentionMaxHeadDim || params.heads < 1 || params.groups < 1 ||
      params.heads % params.groups != 0) {
    return InvalidValue(__LINE__);
  }
  const int d = static_cast<int>(params.d);
  const int64_t k_tiles = (params.tk + kKeys - 1) / kKeys;
  const int64_t q_tiles = (params.tq + kWarp - 1) / kWarp;
  // Key tiles per (batch, key/value head) pair.
  const int64_t batch_groups = params.batch_heads / params.heads * params.groups;
  const unsigned k_blocks = GridBlocks(batch_groups, k_tiles);
  const unsigned q_blocks = GridBlocks(params.batch_heads, q_tiles);
  if ((k_tiles > 0 && k_blocks == 0) || (q_tiles > 0 && q_blocks == 0)) {
    return InvalidValue(__LINE__);
  }
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    const T* pq = static_cast<const T*>(q);
    const T* pk = static_cast<const T*>(k);
    const T* pv = static_cast<const T*>(v);
    const T* po = static_cast<const T*>(out);
    const T* pdo = static_cast<const T*>(dout);
    if (k_blocks > 0) {
      const size_t shared = KeyGradSharedBytes(d);
      MT_RETURN_IF_LAUNCH_FAILED(AllowShared(AttentionKeyGradKernel<T>, shared));
      MT_LAUNCH(k_blocks, kWarp, shared, s, AttentionKeyGradKernel<T>)
      (pq, pk, pv, po, pdo, lse, static_cast<T*>(dk), static_cast<T*>(dv), params, k_tiles);
      MT_CHECK_LAUNCH();
    }
    if (q_blocks > 0) {
      const size_t shared = QueryGradSharedBytes(d);
      MT_RETURN_IF_LAUNCH_FAILED(AllowShared(AttentionQueryGradKernel<T>, shared));
      MT_LAUNCH(q_blocks, kWarp, shared, s, AttentionQueryGradKernel<T>)
      (pq, pk, pv, po, pdo, lse, static_cast<T*>(dq), params, q_tiles);
      MT_CHECK_LAUNCH();
    }
    return {};
  });
}

}  // namespace cuda
}  // namespace mt
