#include "core/ops/gemm_packed.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "glog/logging.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MT_AVX2_FMA __attribute__((target("avx2,fma")))
#endif

namespace mt {
namespace ops {
namespace internal {

bool PackedGemmSupported(const CpuFeatures& features) {
#if defined(__x86_64__)
  return features.UsableAvx2Fma();
#else
  (void)features;
  return false;
#endif
}

#if defined(__x86_64__)
namespace {

// The register tile (6 rows of 16 floats: 12 of the 16 YMM registers) and the cache blocks: an
// op(A) block of kMc x kKc floats (216 KiB, in L2), an op(B) panel of kKc x kNr (24 KiB, in L1),
// and op(B) blocks of kKc x kNc (4.5 MiB, in L3). Measured on a 2-core Xeon with AVX2 only
// (OPENBLAS_CORETYPE=Haswell for the comparison): kKc 384 beat 256, 512 and 768 at GPT-2's shapes.
constexpr int kMr = 6, kNr = 16;
constexpr int64_t kKc = 384, kMc = 144, kNc = 3072;
static_assert(kMc % kMr == 0 && kNc % kNr == 0, "blocks hold whole tiles");

struct AlignedDelete {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using AlignedFloats = std::unique_ptr<float[], AlignedDelete>;

AlignedFloats AllocateAligned(int64_t n) {
  return AlignedFloats(
      static_cast<float*>(::operator new[](n * sizeof(float), std::align_val_t(64))));
}

// The calling thread's packed blocks, allocated on its first product and kept.
struct PackBuffers {
  // The op(A) block, plus the 2 floats the last transposed store of a panel writes past it.
  AlignedFloats a = AllocateAligned(kMc * kKc + 8);
  AlignedFloats b = AllocateAligned(kKc * kNc);
};

PackBuffers& ThreadBuffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

// 8 consecutive elements as f32.
MT_AVX2_FMA inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
MT_AVX2_FMA inline __m256 Load8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
MT_AVX2_FMA inline __m256 Load8(const f16* p) {
  alignas(32) float w[8];
  for (int i = 0; i < 8; ++i) w[i] = HalfToFloat(p[i]);
  return _mm256_load_ps(w);
}

// Transposes the 8 x 8 block held as 8 row vectors.
MT_AVX2_FMA inline void Transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// A stored row-major operand: element (r, c) at data[r * ld + c].
template <typename T>
struct Stored {
  const T* data;
  int64_t ld;
  bool trans;  // op(X) is the stored matrix's transpose.
};

// Packs op(A)[i0 : i0 + mc, k0 : k0 + kc] into panels of kMr rows: panel p holds, for each k, its
// kMr row values (rows past mc are 0), at out + p * kMr * kc.
template <typename T>
MT_AVX2_FMA void PackA(Stored<T> a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out) {
  for (int64_t ip = 0; ip < mc; ip += kMr) {
    const int mr = static_cast<int>(std::min<int64_t>(kMr, mc - ip));
    float* o = out + ip * kc;
    if (a.trans) {  // Stored [K, M]: each k's rows are contiguous.
      for (int64_t k = 0; k < kc; ++k) {
        const T* src = a.data + (k0 + k) * a.ld + i0 + ip;
        for (int r = 0; r < kMr; ++r) o[k * kMr + r] = r < mr ? ToFloat(src[r]) : 0.0f;
      }
      continue;
    }
    const T* rows[kMr];
    for (int r = 0; r < kMr; ++r) rows[r] = a.data + (i0 + ip + std::min(r, mr - 1)) * a.ld + k0;
    int64_t k = 0;
    if (mr == kMr) {
      // 8 k at a time: the 6 rows and 2 zero rows transposed; each store writes its k's 6 values
      // and 2 more that the next store (or the next panel) overwrites.
      for (; k + 8 <= kc; k += 8) {
        __m256 v[8];
        for (int r = 0; r < kMr; ++r) v[r] = Load8(rows[r] + k);
        v[6] = v[7] = _mm256_setzero_ps();
        Transpose8(v);
        for (int q = 0; q < 8; ++q) _mm256_storeu_ps(o + (k + q) * kMr, v[q]);
      }
    }
    for (; k < kc; ++k) {
      for (int r = 0; r < kMr; ++r) o[k * kMr + r] = r < mr ? ToFloat(rows[r][k]) : 0.0f;
    }
  }
}

// Packs op(B)[k0 : k0 + kc, j0 : j0 + nr] (nr <= kNr) into one panel: for each k, kNr column
// values (columns past nr are 0).
template <typename T>
MT_AVX2_FMA void PackB(Stored<T> b, int64_t k0, int64_t kc, int64_t j0, int64_t nr, float* out) {
  if (!b.trans) {  // Stored [K, N]: each k's columns are contiguous.
    for (int64_t k = 0; k < kc; ++k) {
      const T* src = b.data + (k0 + k) * b.ld + j0;
      float* o = out + k * kNr;
      if (nr == kNr) {
        _mm256_store_ps(o, Load8(src));
        _mm256_store_ps(o + 8, Load8(src + 8));
      } else {
        for (int j = 0; j < kNr; ++j) o[j] = j < nr ? ToFloat(src[j]) : 0.0f;
      }
    }
    return;
  }
  // Stored [N, K]: column j of op(B) is row j, contiguous in k.
  const T* cols = b.data + j0 * b.ld + k0;
  int64_t k = 0;
  if (nr == kNr) {
    for (; k + 8 <= kc; k += 8) {
      for (int h = 0; h < 2; ++h) {
        __m256 v[8];
        for (int j = 0; j < 8; ++j) v[j] = Load8(cols + (h * 8 + j) * b.ld + k);
        Transpose8(v);
        for (int q = 0; q < 8; ++q) _mm256_store_ps(out + (k + q) * kNr + h * 8, v[q]);
      }
    }
  }
  for (; k < kc; ++k) {
    for (int j = 0; j < kNr; ++j) out[k * kNr + j] = j < nr ? ToFloat(cols[j * b.ld + k]) : 0.0f;
  }
}

// C[0 : mr, 0 : nr] = alpha * (a panel . b panel) + beta * C (C not read when beta = 0). Each
// element is alpha * sum, rounded, then fused with beta * C: the same bits in the vector and the
// scalar store, so a tile's position in the split never changes its values.
MT_AVX2_FMA void Kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int mr,
                        int nr, float alpha, float beta) {
  // C's tile is first needed at the end: fetch its lines while the products run.
  for (int r = 0; r < mr; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + kNr - 1), _MM_HINT_T0);
  }
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
// One k of the tile: 2 loads of op(B)'s row, 6 broadcasts of op(A)'s column, 12 FMAs.
#define MT_PACKED_STEP(ak, bk)                                         \
  do {                                                                 \
    const __m256 b0 = _mm256_load_ps(bk), b1 = _mm256_load_ps(bk + 8); \
    __m256 x = _mm256_broadcast_ss(ak);                                \
    c00 = _mm256_fmadd_ps(x, b0, c00);                                 \
    c01 = _mm256_fmadd_ps(x, b1, c01);                                 \
    x = _mm256_broadcast_ss(ak + 1);                                   \
    c10 = _mm256_fmadd_ps(x, b0, c10);                                 \
    c11 = _mm256_fmadd_ps(x, b1, c11);                                 \
    x = _mm256_broadcast_ss(ak + 2);                                   \
    c20 = _mm256_fmadd_ps(x, b0, c20);                                 \
    c21 = _mm256_fmadd_ps(x, b1, c21);                                 \
    x = _mm256_broadcast_ss(ak + 3);                                   \
    c30 = _mm256_fmadd_ps(x, b0, c30);                                 \
    c31 = _mm256_fmadd_ps(x, b1, c31);                                 \
    x = _mm256_broadcast_ss(ak + 4);                                   \
    c40 = _mm256_fmadd_ps(x, b0, c40);                                 \
    c41 = _mm256_fmadd_ps(x, b1, c41);                                 \
    x = _mm256_broadcast_ss(ak + 5);                                   \
    c50 = _mm256_fmadd_ps(x, b0, c50);                                 \
    c51 = _mm256_fmadd_ps(x, b1, c51);                                 \
  } while (0)
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4, a += 4 * kMr, b += 4 * kNr) {
    _mm_prefetch(reinterpret_cast<const char*>(a + 8 * kMr), _MM_HINT_T0);
    MT_PACKED_STEP(a, b);
    MT_PACKED_STEP(a + kMr, b + kNr);
    MT_PACKED_STEP(a + 2 * kMr, b + 2 * kNr);
    MT_PACKED_STEP(a + 3 * kMr, b + 3 * kNr);
  }
  for (; k < kc; ++k, a += kMr, b += kNr) MT_PACKED_STEP(a, b);
#undef MT_PACKED_STEP
  const __m256 acc[2 * kMr] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  const __m256 va = _mm256_set1_ps(alpha);
  if (mr == kMr && nr == kNr) {
    const __m256 vb = _mm256_set1_ps(beta);
    for (int r = 0; r < kMr; ++r) {
      float* row = c + r * ldc;
      for (int h = 0; h < 2; ++h) {
        __m256 v = _mm256_mul_ps(acc[2 * r + h], va);
        if (beta != 0.0f) v = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * h), vb, v);
        _mm256_storeu_ps(row + 8 * h, v);
      }
    }
    return;
  }
  alignas(32) float tile[kMr * kNr];
  for (int i = 0; i < 2 * kMr; ++i) _mm256_store_ps(tile + 8 * i, _mm256_mul_ps(acc[i], va));
  for (int r = 0; r < mr; ++r) {
    for (int j = 0; j < nr; ++j) {
      const float v = tile[r * kNr + j];
      float& out = c[r * ldc + j];
      out = beta != 0.0f ? std::fma(out, beta, v) : v;
    }
  }
}

// C[i0 : i1, j0 : j1] of one product, on the calling thread.
template <typename TA, typename TB>
MT_AVX2_FMA void Block(const GemmShape& s, float alpha, Stored<TA> a, Stored<TB> b, float beta,
                       float* c, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  PackBuffers& buffers = ThreadBuffers();
  float* pa = buffers.a.get();
  float* pb = buffers.b.get();
  for (int64_t jc = j0; jc < j1; jc += kNc) {
    const int64_t nc = std::min(kNc, j1 - jc);
    for (int64_t pc = 0; pc < s.k; pc += kKc) {
      const int64_t kc = std::min(kKc, s.k - pc);
      const float scale_c = pc == 0 ? beta : 1.0f;  // Later K blocks add to the earlier ones.
      for (int64_t ic = i0; ic < i1; ic += kMc) {
        const int64_t mc = std::min(kMc, i1 - ic);
        PackA(a, ic, mc, pc, kc, pa);
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          const int64_t nr = std::min<int64_t>(kNr, nc - jr);
          // Each op(B) panel is packed by the first row block, right before it is multiplied.
          if (ic == i0) PackB(b, pc, kc, jc + jr, nr, pb + jr * kc);
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            Kernel(kc, pa + ir * kc, pb + jr * kc, c + (ic + ir) * s.n + jc + jr, s.n,
                   static_cast<int>(std::min<int64_t>(kMr, mc - ir)), static_cast<int>(nr), alpha,
                   scale_c);
          }
        }
      }
    }
  }
}

}  // namespace

template <typename TA, typename TB>
void PackedGemm(const ExecContext& ctx, const GemmShape& s, float alpha, const TA* a, const TB* b,
                float beta, float* c) {
  if (s.m == 0 || s.n == 0) return;
  const int64_t size_a = s.m * s.k, size_b = s.k * s.n, size_c = s.m * s.n;
  if (s.k == 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < s.batch * size_c; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  // Threads own ranges of whole tiles along C's longer side.
  const bool split_n = s.n >= s.m;
  const int64_t tile = split_n ? kNr : kMr;
  const int64_t tiles = ((split_n ? s.n : s.m) + tile - 1) / tile;
  const int64_t parts = std::min<int64_t>(ctx.num_threads(), tiles);
  for (int64_t e = 0; e < s.batch; ++e) {
    const Stored<TA> sa{a + e * size_a, s.trans_a ? s.m : s.k, s.trans_a};
    const Stored<TB> sb{b + e * size_b, s.trans_b ? s.k : s.n, s.trans_b};
    float* ce = c + e * size_c;
    ParallelFor(ctx.pool, parts, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t lo = tiles * p / parts * tile, hi = tiles * (p + 1) / parts * tile;
        if (split_n) {
          Block(s, alpha, sa, sb, beta, ce, 0, s.m, lo, std::min(hi, s.n));
        } else {
          Block(s, alpha, sa, sb, beta, ce, lo, std::min(hi, s.m), 0, s.n);
        }
      }
    });
  }
}

#else  // Not x86-64: PackedGemmSupported is false, and the callers check it.

template <typename TA, typename TB>
void PackedGemm(const ExecContext&, const GemmShape&, float, const TA*, const TB*, float, float*) {
  LOG(FATAL) << "PackedGemm needs an x86-64 CPU with AVX2 and FMA";
}

#endif

#define MT_PACKED_GEMM_INSTANTIATE(TA, TB)                                                 \
  template void PackedGemm<TA, TB>(const ExecContext&, const GemmShape&, float, const TA*, \
                                   const TB*, float, float*);
MT_PACKED_GEMM_INSTANTIATE(float, float)
MT_PACKED_GEMM_INSTANTIATE(bf16, bf16)
MT_PACKED_GEMM_INSTANTIATE(bf16, float)
MT_PACKED_GEMM_INSTANTIATE(float, bf16)
MT_PACKED_GEMM_INSTANTIATE(f16, f16)
MT_PACKED_GEMM_INSTANTIATE(f16, float)
MT_PACKED_GEMM_INSTANTIATE(float, f16)
#undef MT_PACKED_GEMM_INSTANTIATE

}  // namespace internal
}  // namespace ops
}  // namespace mt
