#include "core/ops/gemm_packed.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <string>

#include "core/dtype.h"
#include "core/simd.h"
#include "core/thread_pool.h"
#include "glog/logging.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MT_AVX2_FMA __attribute__((target("avx2,fma")))
#define MT_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
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

// The register tiles: 6 rows of 16 floats (12 of AVX2's 16 YMM registers) and, with AVX-512,
// 12 rows of 32 floats (24 of its 32 ZMM registers). The cache blocks: an op(A) block of kMc x kKc
// floats (216 KiB, in L2), op(B) panels of kKc x kNr (24 or 48 KiB, in L1 or streamed from L2),
// and op(B) blocks of kKc x kNc (4.5 MiB, in L3). Both tiles share kKc, so each C element is
// summed in the same order by either kernel: the same bits whatever the instruction set.
// kKc: 384 was ahead of 256, 512 and 768 for the AVX2 kernel at GPT-2's shapes on a 2-core Xeon.
template <int kMrT, int kNrT>
struct Tile {
  static constexpr int kMr = kMrT, kNr = kNrT;
};
using Avx2Tile = Tile<6, 16>;
using Avx512Tile = Tile<12, 32>;
constexpr int64_t kKc = 384, kMc = 144, kNc = 3072;
static_assert(kMc % Avx2Tile::kMr == 0 && kMc % Avx512Tile::kMr == 0 && kNc % Avx2Tile::kNr == 0 &&
                  kNc % Avx512Tile::kNr == 0,
              "blocks hold whole tiles");

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
  // The op(A) block, plus the floats the last transposed store of a panel writes past it.
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
template <int kMr, typename T>
MT_AVX2_FMA void PackA(Stored<T> a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out) {
  constexpr int kGroups = (kMr + 7) / 8;  // Of 8 rows, transposed together.
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
      // 8 k at a time, 8 rows at a time (zero rows past kMr): each k's stores, in order, write its
      // kMr values and up to 7 more that the next k's first store (or the next panel)
      // overwrites.
      for (; k + 8 <= kc; k += 8) {
        __m256 v[kGroups][8];
        for (int g = 0; g < kGroups; ++g) {
          for (int r = 0; r < 8; ++r) {
            v[g][r] = 8 * g + r < kMr ? Load8(rows[8 * g + r] + k) : _mm256_setzero_ps();
          }
          Transpose8(v[g]);
        }
        for (int q = 0; q < 8; ++q) {
          for (int g = 0; g < kGroups; ++g) _mm256_storeu_ps(o + (k + q) * kMr + 8 * g, v[g][q]);
        }
      }
    }
    for (; k < kc; ++k) {
      for (int r = 0; r < kMr; ++r) o[k * kMr + r] = r < mr ? ToFloat(rows[r][k]) : 0.0f;
    }
  }
}

// Packs op(B)[k0 : k0 + kc, j0 : j0 + nr] (nr <= kNr) into one panel: for each k, kNr column
// values (columns past nr are 0).
template <int kNr, typename T>
MT_AVX2_FMA void PackB(Stored<T> b, int64_t k0, int64_t kc, int64_t j0, int64_t nr, float* out) {
  if (!b.trans) {  // Stored [K, N]: each k's columns are contiguous.
    for (int64_t k = 0; k < kc; ++k) {
      const T* src = b.data + (k0 + k) * b.ld + j0;
      float* o = out + k * kNr;
      if (nr == kNr) {
        for (int h = 0; h < kNr; h += 8) _mm256_store_ps(o + h, Load8(src + h));
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
      for (int h = 0; h < kNr; h += 8) {
        __m256 v[8];
        for (int j = 0; j < 8; ++j) v[j] = Load8(cols + (h + j) * b.ld + k);
        Transpose8(v);
        for (int q = 0; q < 8; ++q) _mm256_store_ps(out + (k + q) * kNr + h, v[q]);
      }
    }
  }
  for (; k < kc; ++k) {
    for (int j = 0; j < kNr; ++j) out[k * kNr + j] = j < nr ? ToFloat(cols[j * b.ld + k]) : 0.0f;
  }
}

// The scalar store of a partial tile (rows mr <= kMr, columns nr <= kNr of `tile`, which holds
// alpha * sum): the bits of the vector store, v or fma(C, beta, v).
template <int kNr>
void StorePartial(const float* tile, float* c, int64_t ldc, int mr, int nr, float beta) {
  for (int r = 0; r < mr; ++r) {
    for (int j = 0; j < nr; ++j) {
      const float v = tile[r * kNr + j];
      float& out = c[r * ldc + j];
      out = beta != 0.0f ? std::fma(out, beta, v) : v;
    }
  }
}

// C[0 : mr, 0 : nr] = alpha * (a panel . b panel) + beta * C (C not read when beta = 0). Each
// element is alpha * sum, rounded, then fused with beta * C: the same bits in the vector and the
// scalar store, so a tile's position in the split never changes its values.
MT_AVX2_FMA void Kernel(Avx2Tile, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                        int mr, int nr, float alpha, float beta) {
  constexpr int kMr = Avx2Tile::kMr, kNr = Avx2Tile::kNr;
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
  StorePartial<kNr>(tile, c, ldc, mr, nr, beta);
}

// The same with AVX-512: a 12 x 32 tile, each k 2 loads of op(B)'s row, 12 broadcasts, 24 FMAs.
MT_AVX512 void Kernel(Avx512Tile, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                      int mr, int nr, float alpha, float beta) {
  constexpr int kMr = Avx512Tile::kMr, kNr = Avx512Tile::kNr;
  for (int r = 0; r < mr; ++r) {
    for (int j = 0; j < kNr; j += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + j), _MM_HINT_T0);
    }
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + kNr - 1), _MM_HINT_T0);
  }
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00, c80 = c00, c81 = c00;
  __m512 c90 = c00, c91 = c00, ca0 = c00, ca1 = c00, cb0 = c00, cb1 = c00;
#define MT_PACKED_ROW(ak, r, lo, hi)          \
  do {                                        \
    const __m512 x = _mm512_set1_ps((ak)[r]); \
    lo = _mm512_fmadd_ps(x, b0, lo);          \
    hi = _mm512_fmadd_ps(x, b1, hi);          \
  } while (0)
#define MT_PACKED_STEP512(ak, bk)                                         \
  do {                                                                    \
    const __m512 b0 = _mm512_load_ps(bk), b1 = _mm512_load_ps((bk) + 16); \
    MT_PACKED_ROW(ak, 0, c00, c01);                                       \
    MT_PACKED_ROW(ak, 1, c10, c11);                                       \
    MT_PACKED_ROW(ak, 2, c20, c21);                                       \
    MT_PACKED_ROW(ak, 3, c30, c31);                                       \
    MT_PACKED_ROW(ak, 4, c40, c41);                                       \
    MT_PACKED_ROW(ak, 5, c50, c51);                                       \
    MT_PACKED_ROW(ak, 6, c60, c61);                                       \
    MT_PACKED_ROW(ak, 7, c70, c71);                                       \
    MT_PACKED_ROW(ak, 8, c80, c81);                                       \
    MT_PACKED_ROW(ak, 9, c90, c91);                                       \
    MT_PACKED_ROW(ak, 10, ca0, ca1);                                      \
    MT_PACKED_ROW(ak, 11, cb0, cb1);                                      \
  } while (0)
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4, a += 4 * kMr, b += 4 * kNr) {
    _mm_prefetch(reinterpret_cast<const char*>(a + 8 * kMr), _MM_HINT_T0);
    MT_PACKED_STEP512(a, b);
    MT_PACKED_STEP512(a + kMr, b + kNr);
    MT_PACKED_STEP512(a + 2 * kMr, b + 2 * kNr);
    MT_PACKED_STEP512(a + 3 * kMr, b + 3 * kNr);
  }
  for (; k < kc; ++k, a += kMr, b += kNr) MT_PACKED_STEP512(a, b);
#undef MT_PACKED_STEP512
#undef MT_PACKED_ROW
  const __m512 acc[2 * kMr] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51,
                               c60, c61, c70, c71, c80, c81, c90, c91, ca0, ca1, cb0, cb1};
  const __m512 va = _mm512_set1_ps(alpha);
  if (mr == kMr && nr == kNr) {
    const __m512 vb = _mm512_set1_ps(beta);
    for (int r = 0; r < kMr; ++r) {
      float* row = c + r * ldc;
      for (int h = 0; h < 2; ++h) {
        __m512 v = _mm512_mul_ps(acc[2 * r + h], va);
        if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_loadu_ps(row + 16 * h), vb, v);
        _mm512_storeu_ps(row + 16 * h, v);
      }
    }
    return;
  }
  alignas(64) float tile[kMr * kNr];
  for (int i = 0; i < 2 * kMr; ++i) _mm512_store_ps(tile + 16 * i, _mm512_mul_ps(acc[i], va));
  StorePartial<kNr>(tile, c, ldc, mr, nr, beta);
}

// C[i0 : i1, j0 : j1] of one product with `tile`'s kernel, on the calling thread.
template <typename TileT, typename TA, typename TB>
MT_AVX2_FMA void Block(TileT tile, const GemmShape& s, float alpha, Stored<TA> a, Stored<TB> b,
                       float beta, float* c, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  constexpr int kMr = TileT::kMr, kNr = TileT::kNr;
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
        PackA<kMr>(a, ic, mc, pc, kc, pa);
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          const int64_t nr = std::min<int64_t>(kNr, nc - jr);
          // Each op(B) panel is packed by the first row block, right before it is multiplied.
          if (ic == i0) PackB<kNr>(b, pc, kc, jc + jr, nr, pb + jr * kc);
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            Kernel(tile, kc, pa + ir * kc, pb + jr * kc, c + (ic + ir) * s.n + jc + jr, s.n,
                   static_cast<int>(std::min<int64_t>(kMr, mc - ir)), static_cast<int>(nr), alpha,
                   scale_c);
          }
        }
      }
    }
  }
}

// One product's C split over the pool into ranges of whole tiles along its longer side.
template <typename TileT, typename TA, typename TB>
void Split(const ExecContext& ctx, TileT tile, const GemmShape& s, float alpha, Stored<TA> a,
           Stored<TB> b, float beta, float* c) {
  const bool split_n = s.n >= s.m;
  const int64_t unit = split_n ? TileT::kNr : TileT::kMr;
  const int64_t tiles = ((split_n ? s.n : s.m) + unit - 1) / unit;
  const int64_t parts = std::min<int64_t>(ctx.num_threads(), tiles);
  ParallelFor(ctx.pool, parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t lo = tiles * p / parts * unit, hi = tiles * (p + 1) / parts * unit;
      if (split_n) {
        Block(tile, s, alpha, a, b, beta, c, 0, s.m, lo, std::min(hi, s.n));
      } else {
        Block(tile, s, alpha, a, b, beta, c, lo, std::min(hi, s.m), 0, s.n);
      }
    }
  });
}

// The AVX-512 kernel where the CPU has AVX-512 and our SIMD kernels run at an AVX-512 target
// (core/simd.h: --simd_target=AVX2 imitates an AVX2 CPU here too).
bool UseAvx512() {
  static const bool usable = DetectCpuFeatures().UsableAvx512();
  return usable && SimdTargetName().rfind("AVX3", 0) == 0;
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
  const bool wide = UseAvx512();
  for (int64_t e = 0; e < s.batch; ++e) {
    const Stored<TA> sa{a + e * size_a, s.trans_a ? s.m : s.k, s.trans_a};
    const Stored<TB> sb{b + e * size_b, s.trans_b ? s.k : s.n, s.trans_b};
    if (wide) {
      Split(ctx, Avx512Tile(), s, alpha, sa, sb, beta, c + e * size_c);
    } else {
      Split(ctx, Avx2Tile(), s, alpha, sa, sb, beta, c + e * size_c);
    }
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
