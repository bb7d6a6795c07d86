// The CPU kernels of fused attention (attention_cpu.h): tiles of kQueryTile query rows against
// tiles of kKeyTile keys, widened to f32, with the tile products, exponentials, masking and
// score gradients of core/ops/fast_math.h and the row sums and D_i dot products of
// core/ops/reduce_simd.h (f64 lanes), all SIMD with runtime dispatch.
#include "core/ops/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/ops/dispatch.h"
#include "core/ops/dropout_factors.h"
#include "core/ops/fast_math.h"
#include "core/ops/reduce_simd.h"
#include "core/thread_pool.h"

namespace mt {
namespace ops {
namespace internal {
namespace {

using Problem = AttentionProblem;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Query rows per forward / dq task, keys per tile. A key tile's transposed K and V (64 x D f32)
// and a query tile's rows stay in L1/L2 for the usual head dims (64-128).
constexpr int64_t kQueryTile = 32;
constexpr int64_t kKeyTile = 64;

// Dropout factors of one row of probabilities against a key tile.
using DropoutRow = DropoutFactors<kKeyTile>;

// kt[d * kKeyTile + jj] = x[jj, d] for n rows of x [n, D] (f32).
template <typename T>
void LoadTransposed(const T* x, int64_t n, int64_t D, float* kt) {
  for (int64_t jj = 0; jj < n; ++jj) {
    for (int64_t d = 0; d < D; ++d) kt[d * kKeyTile + jj] = ToFloat(x[jj * D + d]);
  }
}

// The first row r < rows of the query tile starting at i0 that sees key j0 (rows if none):
// KeyEnd grows with i.
int64_t FirstRowSeeing(const Problem& p, int64_t i0, int64_t rows, int64_t j0) {
  if (!p.causal) return 0;
  return std::clamp<int64_t>(j0 - (p.Tk - p.Tq) - i0, 0, rows);
}

// ---- Forward: one task per (b, h, query tile) ----

struct ForwardScratch {
  explicit ForwardScratch(int64_t D)
      : qf(kQueryTile * D),
        acc(kQueryTile * D),
        kt(D * kKeyTile),
        vf(kKeyTile * D),
        s(kQueryTile * kKeyTile),
        m(kQueryTile),
        l(kQueryTile),
        factor(kKeyTile) {}
  std::vector<float> qf, acc;  // The tile's q rows and output accumulators [rows, D].
  std::vector<float> kt, vf;   // A key tile: K transposed [D, kKeyTile], V [n, D].
  std::vector<float> s;        // Scores, then probabilities [rows, kKeyTile].
  std::vector<float> m, l;     // Running maximum and sum per row.
  std::vector<float> factor;   // Dropout factors of one row against the key tile.
};

// One step of the online softmax for query i against keys j0 .. j0 + n, whose raw products
// q_i . k_j are in s: s becomes the (dropped) probabilities relative to the new running maximum
// *m, the accumulator acc [D] of the row is rescaled to it, and the running sum *l updated.
inline void OnlineSoftmaxRow(const Problem& p, int64_t bh, int64_t i, int64_t j0, int64_t n,
                             float* s, float* m, float* l, float* acc, DropoutRow& drop,
                             float* factor) {
  // Scaled scores, -inf where masked (keys at or after KeyEnd(i) are causally masked).
  const int32_t* mask_row = p.MaskRow(bh);
  ScaleAndMask(s, p.scale, p.KeyEnd(i) - j0, mask_row == nullptr ? nullptr : mask_row + j0, n,
               kNegInf);
  const float tile_max = MaxF32(s, n);
  if (tile_max == kNegInf) {
    // Nothing visible here (or every score -inf): the row adds nothing.
    std::fill(s, s + n, 0.0f);
    return;
  }
  const float m_new = std::max(*m, tile_max);
  const float alpha = ExpNonPositive(*m - m_new);  // 0 for the first visible tile.
  ExpTerms(s, 1.0f, m_new, n, s);                  // Masked scores (-inf) give 0.
  const float sum = static_cast<float>(SumF32(s, n));
  *l = *l * alpha + sum;
  *m = m_new;
  if (alpha != 1.0f) ScaleF32(acc, alpha, p.D);
  if (p.dropout != nullptr) {
    drop.Factors((bh * p.Tq + i) * p.Tk + j0, n, p.keep_scale, factor);
    MulF32(s, factor, n);
  }
}

template <typename T>
void ForwardTask(const Problem& p, const T* q, const T* k, const T* v, T* out, float* lse,
                 int64_t task, ForwardScratch& w) {
  const int64_t D = p.D, Tq = p.Tq, Tk = p.Tk;
  const int64_t q_tiles = (Tq + kQueryTile - 1) / kQueryTile;
  const int64_t bh = task / q_tiles;
  const int64_t i0 = (task % q_tiles) * kQueryTile;
  const int64_t rows = std::min(kQueryTile, Tq - i0);
  const T* kb = k + p.KvHead(bh) * Tk * D;
  const T* vb = v + p.KvHead(bh) * Tk * D;
  ToF32(q + (bh * Tq + i0) * D, rows * D, w.qf.data());
  std::fill(w.acc.begin(), w.acc.begin() + rows * D, 0.0f);
  std::fill(w.m.begin(), w.m.end(), kNegInf);
  std::fill(w.l.begin(), w.l.end(), 0.0f);
  DropoutRow drop(p.dropout);
  // No row of the tile sees a key at or after kmax.
  const int64_t kmax = p.KeyEnd(i0 + rows - 1);
  for (int64_t j0 = 0; j0 < kmax; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, kmax - j0);
    LoadTransposed(kb + j0 * D, n, D, w.kt.data());
    ToF32(vb + j0 * D, n * D, w.vf.data());
    // Rows [r0, rows) see some of the tile (causally).
    const int64_t r0 = FirstRowSeeing(p, i0, rows, j0);
    float* s0 = w.s.data() + r0 * kKeyTile;
    std::fill(s0, w.s.data() + rows * kKeyTile, 0.0f);
    MatMulAcc(w.qf.data() + r0 * D, D, w.kt.data(), kKeyTile, s0, kKeyTile, rows - r0, D, n);
    for (int64_t r = r0; r < rows; ++r) {
      OnlineSoftmaxRow(p, bh, i0 + r, j0, n, w.s.data() + r * kKeyTile, &w.m[r], &w.l[r],
                       w.acc.data() + r * D, drop, w.factor.data());
    }
    // Masked and dropped keys multiply v by an exact 0, as in the unfused product.
    MatMulAcc(s0, kKeyTile, w.vf.data(), D, w.acc.data() + r0 * D, D, rows - r0, n, D);
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* acc = w.acc.data() + r * D;
    const float l = w.l[r];
    // l = 0: nothing visible; the row stays zero (it only ever added zeros).
    ScaleF32(acc, l > 0.0f ? 1.0f / l : 0.0f, D);
    lse[bh * Tq + i0 + r] = l > 0.0f ? w.m[r] + std::log(l) : kNegInf;
  }
  FromF32(w.acc.data(), rows * D, out + (bh * Tq + i0) * D);
}

template <typename T>
void ForwardCpu(const ExecContext& ctx, const Problem& p, const TensorView& q, const TensorView& k,
                const TensorView& v, const TensorView& out, const TensorView& lse) {
  const int64_t q_tiles = (p.Tq + kQueryTile - 1) / kQueryTile;
  ParallelFor(ctx.pool, p.B * p.NH * q_tiles, 1, [&](int64_t begin, int64_t end) {
    ForwardScratch w(p.D);
    for (int64_t task = begin; task < end; ++task) {
      ForwardTask<T>(p, q.data_as<T>(), k.data_as<T>(), v.data_as<T>(), out.data_as<T>(),
                     lse.data_as<float>(), task, w);
    }
  });
}

// ---- Backward ----
//
// Two passes without atomics, each over tasks that own their outputs (deterministic): dk and dv
// per (b, key/value head, key tile), looping over the group's query heads and, in each, the query
// rows that see the tile; then dq per (b, h, query
// tile), looping over key tiles. Both recompute the scores and dP = dout v^T tile by tile, and
// the row terms D_i = dout_i . out_i, with the same code, so they see the same probabilities.

// For row i against keys j0 .. j0 + n: the dropped probabilities pd (what multiplied v) and the
// gradient ds of the raw products q_i . k_j (so dq_i = sum_j ds_j k_j), from the raw products
// s = q_i . k_j and dp = dout_i . v_j. Entries of masked keys are 0.
inline void RowGrads(const Problem& p, int64_t bh, int64_t i, int64_t j0, int64_t n, float lse_i,
                     float d_i, const float* s, const float* dp, DropoutRow& drop, float* factor,
                     float* pd, float* ds) {
  // P = exp(scale s - lse) <= 1 (the clamp absorbs the rounding of a recomputed score that
  // exceeds lse); zero where masked.
  const int64_t n_vis = std::clamp<int64_t>(p.KeyEnd(i) - j0, 0, n);
  ExpTerms(s, p.scale, lse_i, n_vis, pd);
  std::fill(pd + n_vis, pd + n, 0.0f);
  if (const int32_t* mask_row = p.MaskRow(bh); mask_row != nullptr) {
    ScaleAndMask(pd, 1.0f, n_vis, mask_row + j0, n, 0.0f);
  }
  // factor: what dropout multiplied the probability by (0 or 1 / (1 - p)).
  if (p.dropout != nullptr) drop.Factors((bh * p.Tq + i) * p.Tk + j0, n, p.keep_scale, factor);
  ScoreGrads(pd, dp, p.dropout == nullptr ? nullptr : factor, p.scale, d_i, n, ds);
}

// Per-thread buffers of both passes.
struct BackwardScratch {
  explicit BackwardScratch(int64_t D)
      : kt(D * kKeyTile),
        vt(D * kKeyTile),
        kf(kKeyTile * D),
        qf(kQueryTile * D),
        dof(kQueryTile * D),
        of(kQueryTile * D),
        acc(2 * std::max(kKeyTile, kQueryTile) * D),
        d(kQueryTile),
        lse(kQueryTile),
        s(kQueryTile * kKeyTile),
        dp(kQueryTile * kKeyTile),
        pd(kQueryTile * kKeyTile),
        ds(kQueryTile * kKeyTile),
        factor(kKeyTile) {}
  std::vector<float> kt, vt, kf;   // A key tile: K and V transposed [D, kKeyTile], K [n, D].
  std::vector<float> qf, dof, of;  // A query tile's q, dout, out rows [rows, D].
  std::vector<float> acc;          // dk and dv of a key tile, or dq of a query tile.
  std::vector<float> d, lse;       // D_i and lse of the query tile's rows.
  // Query tile x key tile: s and dp [rows, kKeyTile]; pd and ds [rows, kKeyTile] (pass 2) or
  // transposed [n, kQueryTile] (pass 1).
  std::vector<float> s, dp, pd, ds;
  std::vector<float> factor;  // Dropout factors of one row against the key tile.
};

// Loads query rows i0 .. i0 + rows of head bh (q, dout, out as f32, lse) and their D_i.
template <typename T>
void LoadQueryTile(const Problem& p, const T* q, const T* out, const T* dout, const float* lse,
                   int64_t bh, int64_t i0, int64_t rows, BackwardScratch& w) {
  const int64_t D = p.D, at = (bh * p.Tq + i0) * D;
  ToF32(q + at, rows * D, w.qf.data());
  ToF32(dout + at, rows * D, w.dof.data());
  ToF32(out + at, rows * D, w.of.data());
  for (int64_t r = 0; r < rows; ++r) {
    w.d[r] = static_cast<float>(DotF32(w.dof.data() + r * D, w.of.data() + r * D, D));
    w.lse[r] = lse[bh * p.Tq + i0 + r];
  }
}

// s = q k^T and dp = dout v^T for query-tile rows [r0, rows) against the n keys in w.kt / w.vt.
void TileScores(int64_t D, int64_t r0, int64_t rows, int64_t n, BackwardScratch& w) {
  float* s0 = w.s.data() + r0 * kKeyTile;
  float* dp0 = w.dp.data() + r0 * kKeyTile;
  std::fill(s0, w.s.data() + rows * kKeyTile, 0.0f);
  std::fill(dp0, w.dp.data() + rows * kKeyTile, 0.0f);
  MatMulAcc(w.qf.data() + r0 * D, D, w.kt.data(), kKeyTile, s0, kKeyTile, rows - r0, D, n);
  MatMulAcc(w.dof.data() + r0 * D, D, w.vt.data(), kKeyTile, dp0, kKeyTile, rows - r0, D, n);
}

// Adds to dk_acc and dv_acc [n, D] the terms of query head bh for the key tile j0 .. j0 + n in
// w.kt / w.vt, over its query tiles in order.
template <typename T>
void AddQueryHeadToKeyTile(const Problem& p, const T* q, const T* out, const T* dout,
                           const float* lse, int64_t bh, int64_t j0, int64_t n, BackwardScratch& w,
                           float* dk_acc, float* dv_acc) {
  const int64_t D = p.D, Tq = p.Tq, Tk = p.Tk;
  DropoutRow drop(p.dropout);
  // Rows before i_start see none of the tile (causal).
  const int64_t i_start = p.causal ? std::clamp<int64_t>(j0 - (Tk - Tq), 0, Tq) : 0;
  float row_pd[kKeyTile], row_ds[kKeyTile];
  for (int64_t i0 = i_start; i0 < Tq; i0 += kQueryTile) {
    const int64_t rows = std::min(kQueryTile, Tq - i0);
    LoadQueryTile(p, q, out, dout, lse, bh, i0, rows, w);
    TileScores(D, 0, rows, n, w);
    // pd and ds transposed ([n, rows]), so that dv += pd^T dout and dk += ds^T q are products
    // of row-major tiles.
    for (int64_t r = 0; r < rows; ++r) {
      if (w.lse[r] == kNegInf) {  // A row that sees nothing.
        std::fill(row_pd, row_pd + n, 0.0f);
        std::fill(row_ds, row_ds + n, 0.0f);
      } else {
        RowGrads(p, bh, i0 + r, j0, n, w.lse[r], w.d[r], w.s.data() + r * kKeyTile,
                 w.dp.data() + r * kKeyTile, drop, w.factor.data(), row_pd, row_ds);
      }
      for (int64_t jj = 0; jj < n; ++jj) {
        w.pd[jj * kQueryTile + r] = row_pd[jj];
        w.ds[jj * kQueryTile + r] = row_ds[jj];
      }
    }
    MatMulAcc(w.pd.data(), kQueryTile, w.dof.data(), D, dv_acc, D, n, rows, D);
    MatMulAcc(w.ds.data(), kQueryTile, w.qf.data(), D, dk_acc, D, n, rows, D);
  }
}

// dk and dv of key tile (bg, j0 .. j0 + n) of the (batch, key/value head) pair bg: the terms of
// the group's query heads in order, each over its query tiles in order.
template <typename T>
void KeyTileTask(const Problem& p, const T* q, const T* k, const T* v, const T* out, const T* dout,
                 const float* lse, T* dk, T* dv, int64_t task, BackwardScratch& w) {
  const int64_t D = p.D, Tk = p.Tk, per_group = p.HeadsPerGroup();
  const int64_t k_tiles = (Tk + kKeyTile - 1) / kKeyTile;
  const int64_t bg = task / k_tiles;
  const int64_t j0 = (task % k_tiles) * kKeyTile;
  const int64_t n = std::min(kKeyTile, Tk - j0);
  LoadTransposed(k + (bg * Tk + j0) * D, n, D, w.kt.data());
  LoadTransposed(v + (bg * Tk + j0) * D, n, D, w.vt.data());
  float* dk_acc = w.acc.data();
  float* dv_acc = dk_acc + n * D;
  std::fill(dk_acc, dk_acc + 2 * n * D, 0.0f);
  // Query head h of batch b reads group h / per_group: bh = b NH + g per_group + r.
  const int64_t first_bh = (bg / p.G) * p.NH + (bg % p.G) * per_group;
  for (int64_t bh = first_bh; bh < first_bh + per_group; ++bh) {
    AddQueryHeadToKeyTile(p, q, out, dout, lse, bh, j0, n, w, dk_acc, dv_acc);
  }
  FromF32(dk_acc, n * D, dk + (bg * Tk + j0) * D);
  FromF32(dv_acc, n * D, dv + (bg * Tk + j0) * D);
}

// dq of query tile (bh, i0 .. i0 + rows), over key tiles in order.
template <typename T>
void QueryTileTask(const Problem& p, const T* q, const T* k, const T* v, const T* out,
                   const T* dout, const float* lse, T* dq, int64_t task, BackwardScratch& w) {
  const int64_t D = p.D, Tq = p.Tq, Tk = p.Tk;
  const int64_t q_tiles = (Tq + kQueryTile - 1) / kQueryTile;
  const int64_t bh = task / q_tiles;
  const int64_t i0 = (task % q_tiles) * kQueryTile;
  const int64_t rows = std::min(kQueryTile, Tq - i0);
  LoadQueryTile(p, q, out, dout, lse, bh, i0, rows, w);
  float* dq_acc = w.acc.data();
  std::fill(dq_acc, dq_acc + rows * D, 0.0f);
  DropoutRow drop(p.dropout);
  const int64_t kmax = p.KeyEnd(i0 + rows - 1);
  for (int64_t j0 = 0; j0 < kmax; j0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, kmax - j0);
    const int64_t at = (p.KvHead(bh) * Tk + j0) * D;
    LoadTransposed(k + at, n, D, w.kt.data());
    LoadTransposed(v + at, n, D, w.vt.data());
    ToF32(k + at, n * D, w.kf.data());
    const int64_t r0 = FirstRowSeeing(p, i0, rows, j0);
    TileScores(D, r0, rows, n, w);
    for (int64_t r = r0; r < rows; ++r) {
      float* ds = w.ds.data() + r * kKeyTile;
      if (w.lse[r] == kNegInf) {  // A row that sees nothing.
        std::fill(ds, ds + n, 0.0f);
        continue;
      }
      RowGrads(p, bh, i0 + r, j0, n, w.lse[r], w.d[r], w.s.data() + r * kKeyTile,
               w.dp.data() + r * kKeyTile, drop, w.factor.data(), w.pd.data() + r * kKeyTile, ds);
    }
    MatMulAcc(w.ds.data() + r0 * kKeyTile, kKeyTile, w.kf.data(), D, dq_acc + r0 * D, D, rows - r0,
              n, D);
  }
  FromF32(dq_acc, rows * D, dq + (bh * Tq + i0) * D);
}

template <typename T>
void BackwardCpu(const ExecContext& ctx, const Problem& p, const TensorView& q, const TensorView& k,
                 const TensorView& v, const TensorView& out, const TensorView& dout,
                 const TensorView& lse, const TensorView& dq, const TensorView& dk,
                 const TensorView& dv) {
  const T* pq = q.data_as<T>();
  const T* pk = k.data_as<T>();
  const T* pv = v.data_as<T>();
  const T* po = out.data_as<T>();
  const T* pdo = dout.data_as<T>();
  const float* plse = lse.data_as<float>();
  const int64_t k_tiles = (p.Tk + kKeyTile - 1) / kKeyTile;
  ParallelFor(ctx.pool, p.B * p.G * k_tiles, 1, [&](int64_t begin, int64_t end) {
    BackwardScratch w(p.D);
    for (int64_t task = begin; task < end; ++task) {
      KeyTileTask<T>(p, pq, pk, pv, po, pdo, plse, dk.data_as<T>(), dv.data_as<T>(), task, w);
    }
  });
  const int64_t q_tiles = (p.Tq + kQueryTile - 1) / kQueryTile;
  ParallelFor(ctx.pool, p.B * p.NH * q_tiles, 1, [&](int64_t begin, int64_t end) {
    BackwardScratch w(p.D);
    for (int64_t task = begin; task < end; ++task) {
      QueryTileTask<T>(p, pq, pk, pv, po, pdo, plse, dq.data_as<T>(), task, w);
    }
  });
}

}  // namespace

void FusedAttentionCpu(const ExecContext& ctx, const AttentionProblem& p, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse) {
  DispatchFloat(q.dtype, [&](auto tag) { ForwardCpu<decltype(tag)>(ctx, p, q, k, v, out, lse); });
}

void FusedAttentionBackwardCpu(const ExecContext& ctx, const AttentionProblem& p,
                               const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView& dout, const TensorView& lse,
                               const TensorView& dq, const TensorView& dk, const TensorView& dv) {
  DispatchFloat(q.dtype, [&](auto tag) {
    BackwardCpu<decltype(tag)>(ctx, p, q, k, v, out, dout, lse, dq, dk, dv);
  });
}

}  // namespace internal
}  // namespace ops
}  // namespace mt
