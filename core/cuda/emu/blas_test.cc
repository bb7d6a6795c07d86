// Tests of the emulator's cuBLAS / cuBLASLt (blas.cc) against a float64 reference written here,
// through the C API only, with device memory from the emulator's cudaMalloc. Matrices are
// column-major with padded leading dimensions and batch strides whose padding must survive, and
// C is NaN wherever beta = 0 says it is not read.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <iterator>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace cuda_emu {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double UnitRoundoff(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return std::ldexp(1.0, -24);
    case CUDA_R_16F:
      return std::ldexp(1.0, -11);
    default:
      return std::ldexp(1.0, -8);  // bf16
  }
}

// Half the spacing of the type's subnormals: the absolute rounding error near zero.
double SubnormalRoundoff(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return std::ldexp(1.0, -150);
    case CUDA_R_16F:
      return std::ldexp(1.0, -25);
    default:
      return std::ldexp(1.0, -134);  // bf16
  }
}

size_t TypeSize(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

const char* TypeName(cudaDataType_t type) {
  return type == CUDA_R_32F ? "f32" : (type == CUDA_R_16F ? "f16" : "bf16");
}

// Host elements of one type; values go in and out as doubles (rounded to nearest on the way in).
class HostBuffer {
 public:
  HostBuffer(cudaDataType_t type, int64_t count)
      : type_(type), bytes_(static_cast<size_t>(count) * TypeSize(type)) {}

  void Set(int64_t i, double v) {
    const float f = static_cast<float>(v);
    unsigned char* p = bytes_.data() + static_cast<size_t>(i) * TypeSize(type_);
    if (type_ == CUDA_R_32F) {
      std::memcpy(p, &f, 4);
    } else if (type_ == CUDA_R_16F) {
      const __half h = __float2half_rn(f);
      std::memcpy(p, &h, 2);
    } else {
      const __nv_bfloat16 h = __float2bfloat16_rn(f);
      std::memcpy(p, &h, 2);
    }
  }
  double Get(int64_t i) const {
    const unsigned char* p = bytes_.data() + static_cast<size_t>(i) * TypeSize(type_);
    if (type_ == CUDA_R_32F) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    if (type_ == CUDA_R_16F) {
      __half h;
      std::memcpy(&h, p, 2);
      return __half2float(h);
    }
    __nv_bfloat16 h;
    std::memcpy(&h, p, 2);
    return __bfloat162float(h);
  }
  // Every element uniform in [-1, 1] (rounded to the type), or NaN.
  void Fill(std::mt19937* rng, bool nan = false) {
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (int64_t i = 0; i < count(); ++i) Set(i, nan ? kNaN : dist(*rng));
  }
  int64_t count() const { return static_cast<int64_t>(bytes_.size() / TypeSize(type_)); }
  cudaDataType_t type() const { return type_; }
  std::vector<unsigned char>& bytes() { return bytes_; }
  const std::vector<unsigned char>& bytes() const { return bytes_; }

 private:
  cudaDataType_t type_;
  std::vector<unsigned char> bytes_;
};

// A cudaMalloc allocation holding a copy of a host buffer.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const HostBuffer& host) : bytes_(host.bytes().size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes_ == 0 ? 1 : bytes_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.bytes().data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  void CopyTo(HostBuffer* host) const {
    ASSERT_EQ(host->bytes().size(), bytes_);
    ASSERT_EQ(cudaMemcpy(host->bytes().data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// A batch of column-major matrices: element (i, j) of matrix b at b * stride + i + j * ld.
struct Shape {
  int64_t rows = 0, cols = 0, ld = 0, stride = 0, batch = 1;
  int64_t Index(int64_t b, int64_t i, int64_t j) const { return b * stride + i + j * ld; }
  int64_t Elements() const { return (batch - 1) * stride + (cols - 1) * ld + rows; }
};

// `rows` x `cols` with a padded leading dimension and (for a batch) a padded batch stride.
Shape MakeShape(int64_t rows, int64_t cols, int64_t batch, int64_t ld_pad, int64_t stride_pad) {
  Shape s;
  s.rows = rows;
  s.cols = cols;
  s.ld = rows + ld_pad;
  s.batch = batch;
  s.stride = batch > 1 ? s.ld * cols + stride_pad : 0;
  return s;
}

// The largest power of two (at most 256) dividing the pointer and the batch stride in bytes.
uint32_t Alignment(const void* p, int64_t batch, int64_t stride_bytes) {
  uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) | 256u;
  if (batch > 1) bits |= static_cast<uint64_t>(stride_bytes);
  return static_cast<uint32_t>(bits & (~bits + 1));
}

// The tanh form of GeLU, in double.
double GeluTanh(double x) {
  const double kSqrt2OverPi = std::sqrt(2.0 / std::acos(-1.0));
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

// Checks the elements of `got` outside the matrices of `s` equal those of `before`.
void ExpectPaddingUnchanged(const HostBuffer& got, const HostBuffer& before, const Shape& s,
                            const char* name) {
  std::vector<bool> inside(static_cast<size_t>(got.count()), false);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t j = 0; j < s.cols; ++j) {
      for (int64_t i = 0; i < s.rows; ++i) inside[static_cast<size_t>(s.Index(b, i, j))] = true;
    }
  }
  const size_t size = TypeSize(got.type());
  for (int64_t e = 0; e < got.count(); ++e) {
    if (inside[static_cast<size_t>(e)]) continue;
    ASSERT_EQ(std::memcmp(got.bytes().data() + e * size, before.bytes().data() + e * size, size), 0)
        << name << " element " << e << " outside the matrices was written";
  }
}

// ---- A GEMM case and its float64 reference ----

struct GemmCase {
  cudaDataType_t ab = CUDA_R_32F;  // A and B
  cudaDataType_t cd = CUDA_R_32F;  // C and D (and bias, aux)
  int64_t m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  float alpha = 1.0f, beta = 0.0f;
  bool in_place = false;  // C == D (cuBLASLt only; the legacy API is always in place)

  bool bias() const {
    return epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
           epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  }
  bool gelu() const { return (epilogue & CUBLASLT_EPILOGUE_GELU) != 0; }
  bool aux() const {
    return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  }
  std::string Describe() const {
    return std::string(TypeName(ab)) + "->" + TypeName(cd) + " m=" + std::to_string(m) +
           " n=" + std::to_string(n) + " k=" + std::to_string(k) + (trans_a ? " T" : " N") +
           (trans_b ? "T" : "N") + " batch=" + std::to_string(batch) +
           " epilogue=" + std::to_string(epilogue) + " alpha=" + std::to_string(alpha) +
           " beta=" + std::to_string(beta) + (in_place ? " in-place" : "");
  }
};

// The operands of a case, filled with random values (C with NaN where beta = 0 and C is not D).
struct Operands {
  Shape a, b, c, d, aux;
  int64_t bias_stride = 0;
  HostBuffer ha, hb, hc, hd, hbias, haux;

  Operands(const GemmCase& g, std::mt19937* rng)
      : a(MakeShape(g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.batch, 3, 5)),
        b(MakeShape(g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.batch, 1, 2)),
        c(MakeShape(g.m, g.n, g.batch, 2, 3)),
        d(g.in_place ? c : MakeShape(g.m, g.n, g.batch, 0, 1)),
        ha(g.ab, a.Elements()),
        hb(g.ab, b.Elements()),
        hc(g.cd, c.Elements()),
        hd(g.cd, d.Elements()),
        hbias(g.cd, 1),
        haux(g.cd, 1) {
    ha.Fill(rng);
    hb.Fill(rng);
    hc.Fill(rng, /*nan=*/g.beta == 0.0f);
    hd.Fill(rng);
    if (g.bias()) {
      // A batch gets its own bias (stride m + 1); batch 1 checks the default stride 0.
      bias_stride = g.batch > 1 ? g.m + 1 : 0;
      hbias = HostBuffer(g.cd, (g.batch - 1) * bias_stride + g.m);
      hbias.Fill(rng);
    }
    if (g.aux()) {
      // cuBLASLt: the aux ld and batch stride are multiples of 8, the ld at least m.
      aux.rows = g.m;
      aux.cols = g.n;
      aux.ld = (g.m + 7) / 8 * 8 + 8;
      aux.batch = g.batch;
      aux.stride = g.batch > 1 ? aux.ld * g.n + 8 : 0;
      haux = HostBuffer(g.cd, aux.Elements());
      haux.Fill(rng);
    }
  }

  // The input of D's epilogue function (after alpha, beta and the bias) in float64, and a bound on
  // the error of float accumulation and scaling.
  void Reference(const GemmCase& g, int64_t bi, int64_t i, int64_t j, const HostBuffer& c_in,
                 double* x, double* err) const {
    double sum = 0.0, abs_sum = 0.0;
    for (int64_t p = 0; p < g.k; ++p) {
      const double av = ha.Get(g.trans_a ? a.Index(bi, p, i) : a.Index(bi, i, p));
      const double bv = hb.Get(g.trans_b ? b.Index(bi, j, p) : b.Index(bi, p, j));
      sum += av * bv;
      abs_sum += std::fabs(av * bv);
    }
    double v = g.alpha * sum, mag = std::fabs(g.alpha) * abs_sum;
    if (g.beta != 0.0f) {
      const double cv = g.beta * c_in.Get(c.Index(bi, i, j));
      v += cv;
      mag += std::fabs(cv);
    }
    if (g.bias()) {
      const double bias = hbias.Get(bi * bias_stride + i);
      v += bias;
      mag += std::fabs(bias);
    }
    *x = v;
    // Float sums of k + 3 terms: at most (k + 3) u32 relative to the sum of magnitudes.
    *err = 2.0 * static_cast<double>(g.k + 3) * UnitRoundoff(CUDA_R_32F) * mag;
  }

  // Compares D (and the aux output) with the reference and checks nothing outside the matrices
  // was written.
  void Check(const GemmCase& g, const HostBuffer& d_out, const HostBuffer& aux_out) const {
    const double u = UnitRoundoff(g.cd), u32 = UnitRoundoff(CUDA_R_32F);
    const double eta = SubnormalRoundoff(g.cd);
    const HostBuffer& c_in = g.in_place ? hd : hc;
    for (int64_t bi = 0; bi < g.batch; ++bi) {
      for (int64_t j = 0; j < g.n; ++j) {
        for (int64_t i = 0; i < g.m; ++i) {
          double x, err;
          Reference(g, bi, i, j, c_in, &x, &err);
          if (g.aux()) {
            const double got = aux_out.Get(aux.Index(bi, i, j));
            const double tol = 1.01 * (err + u * (std::fabs(x) + err) + eta);
            ASSERT_NEAR(got, x, tol) << "aux (" << bi << ", " << i << ", " << j << ")";
          }
          double want = x, tol = 1.01 * (err + u * (std::fabs(x) + err) + eta);
          if (g.gelu()) {
            want = GeluTanh(x);
            // |GeLU'| < 1.13; float tanh and arithmetic add a few u32.
            const double e = 1.13 * err + 16.0 * u32 * (std::fabs(x) + 1.0);
            tol = 1.01 * (e + u * (std::fabs(want) + e) + eta);
          }
          const double got = d_out.Get(d.Index(bi, i, j));
          ASSERT_NEAR(got, want, tol) << "D (" << bi << ", " << i << ", " << j << ")";
        }
      }
    }
    ExpectPaddingUnchanged(d_out, hd, d, "D");
    if (g.aux()) ExpectPaddingUnchanged(aux_out, haux, aux, "aux");
  }
};

// ---- cuBLASLt helpers ----

class LtTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasLtCreate(&handle_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cublasLtDestroy(handle_), CUBLAS_STATUS_SUCCESS); }

  cublasLtHandle_t handle_ = nullptr;
};

// Descriptors for one problem; destroys them.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;

  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    if (c != d) cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
  }
};

template <typename V>
cublasStatus_t SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, V v) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v));
}
template <typename V>
cublasStatus_t SetLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, V v) {
  return cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof(v));
}
template <typename V>
cublasStatus_t SetPref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                       V v) {
  return cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v));
}

void MakeLayout(cublasLtMatrixLayout_t* l, cudaDataType_t type, const Shape& s) {
  ASSERT_EQ(cublasLtMatrixLayoutCreate(l, type, static_cast<uint64_t>(s.rows),
                                       static_cast<uint64_t>(s.cols), s.ld),
            CUBLAS_STATUS_SUCCESS);
  if (s.batch > 1) {
    ASSERT_EQ(SetLayout(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(s.batch)),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(SetLayout(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, s.stride),
              CUBLAS_STATUS_SUCCESS);
  }
}

// Runs one case through cuBLASLt (the heuristic's algorithm) and checks it.
void RunLt(cublasLtHandle_t handle, const GemmCase& g, uint32_t seed) {
  SCOPED_TRACE(g.Describe());
  std::mt19937 rng(seed);
  const Operands ops(g, &rng);
  const DeviceBuffer da(ops.ha), db(ops.hb), dc(ops.hc), dd(ops.hd), dbias(ops.hbias),
      daux(ops.haux);
  void* c_ptr = g.in_place ? dd.get() : dc.get();
  LtPlan plan;
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                    static_cast<int32_t>(g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                    static_cast<int32_t>(g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(g.epilogue)),
            CUBLAS_STATUS_SUCCESS);
  if (g.bias()) {
    ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                      static_cast<const void*>(dbias.get())),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(g.cd)),
              CUBLAS_STATUS_SUCCESS);
    if (g.batch > 1) {
      ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, ops.bias_stride),
                CUBLAS_STATUS_SUCCESS);
    }
  }
  if (g.aux()) {
    ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, daux.get()),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ops.aux.ld),
              CUBLAS_STATUS_SUCCESS);
    if (g.batch > 1) {
      ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, ops.aux.stride),
                CUBLAS_STATUS_SUCCESS);
    }
  }
  MakeLayout(&plan.a, g.ab, ops.a);
  MakeLayout(&plan.b, g.ab, ops.b);
  MakeLayout(&plan.d, g.cd, ops.d);
  if (g.in_place) {
    plan.c = plan.d;
  } else {
    MakeLayout(&plan.c, g.cd, ops.c);
  }
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
  const int64_t ab_size = static_cast<int64_t>(TypeSize(g.ab));
  const int64_t cd_size = static_cast<int64_t>(TypeSize(g.cd));
  // The alignments the pointers and batch strides really have, as a caller would promise them.
  ASSERT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    Alignment(da.get(), g.batch, ops.a.stride * ab_size)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    Alignment(db.get(), g.batch, ops.b.stride * ab_size)),
            CUBLAS_STATUS_SUCCESS);
  const Shape& cs = g.in_place ? ops.d : ops.c;
  ASSERT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    Alignment(c_ptr, g.batch, cs.stride * cd_size)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                    Alignment(dd.get(), g.batch, ops.d.stride * cd_size)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{0}),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.c, plan.d,
                                           plan.pref, 1, &result, &found),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(found, 1);
  ASSERT_EQ(result.state, CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmul(handle, plan.desc, &g.alpha, da.get(), plan.a, db.get(), plan.b, &g.beta,
                           c_ptr, plan.c, dd.get(), plan.d, &result.algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  HostBuffer d_out(g.cd, ops.d.Elements()), aux_out = ops.haux;
  dd.CopyTo(&d_out);
  if (g.aux()) daux.CopyTo(&aux_out);
  ops.Check(g, d_out, aux_out);
}

struct TypePair {
  cudaDataType_t ab, cd;
};
constexpr TypePair kTypePairs[] = {{CUDA_R_32F, CUDA_R_32F},
                                   {CUDA_R_16BF, CUDA_R_16BF},
                                   {CUDA_R_16F, CUDA_R_16F},
                                   {CUDA_R_16BF, CUDA_R_32F},
                                   {CUDA_R_16F, CUDA_R_32F}};
constexpr int64_t kSizes[] = {1, 3, 17, 33};

// Calls run(g, seed) for every type pair, m, n, k, transpose and batch count, with beta 0 or
// `beta` by turns and the seed counting up from `seed`; stops at the first fatal failure.
// Returns the next seed.
template <typename Run>
uint32_t ForEachProduct(const std::vector<int64_t>& ms, const std::vector<int64_t>& ns,
                        const std::vector<int64_t>& ks, float alpha, float beta, uint32_t seed,
                        Run run) {
  for (const TypePair& t : kTypePairs) {
    for (int64_t m : ms) {
      for (int64_t n : ns) {
        for (int64_t k : ks) {
          for (int trans = 0; trans < 4; ++trans) {
            for (int64_t batch : {1, 3}) {
              GemmCase g;
              g.ab = t.ab;
              g.cd = t.cd;
              g.m = m;
              g.n = n;
              g.k = k;
              g.trans_a = (trans & 1) != 0;
              g.trans_b = (trans & 2) != 0;
              g.batch = batch;
              g.alpha = alpha;
              g.beta = (seed / 2) % 2 == 0 ? 0.0f : beta;
              run(g, seed++);
              if (::testing::Test::HasFatalFailure()) return seed;
            }
          }
        }
      }
    }
  }
  return seed;
}

std::vector<int64_t> AllSizes() { return {std::begin(kSizes), std::end(kSizes)}; }

TEST_F(LtTest, MatchesFloat64Reference) {
  ForEachProduct(AllSizes(), AllSizes(), AllSizes(), 0.75f, -0.5f, 1,
                 [&](GemmCase& g, uint32_t seed) {
                   g.in_place = seed % 3 == 0;
                   RunLt(handle_, g, seed);
                 });
}

TEST_F(LtTest, EpiloguesMatchFloat64Reference) {
  constexpr cublasLtEpilogue_t kEpilogues[] = {
      CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_AUX,
      CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS};
  uint32_t seed = 1000;
  for (cublasLtEpilogue_t e : kEpilogues) {
    seed = ForEachProduct(AllSizes(), {1, 17}, {3, 33}, 1.25f, 0.5f, seed,
                          [&](GemmCase& g, uint32_t case_seed) {
                            g.epilogue = e;
                            g.in_place = case_seed % 3 == 0;
                            RunLt(handle_, g, case_seed);
                          });
    if (HasFatalFailure()) return;
  }
}

// Hand-computed: column-major A = [1 2; 3 4] (stored 1 3 2 4), B = [5 6; 7 8] (5 7 6 8).
TEST_F(LtTest, HandComputedProductsAndGelu) {
  const float a[] = {1, 3, 2, 4}, b[] = {5, 7, 6, 8};
  HostBuffer ha(CUDA_R_32F, 4), hb(CUDA_R_32F, 4), hd(CUDA_R_32F, 4);
  for (int i = 0; i < 4; ++i) {
    ha.Set(i, a[i]);
    hb.Set(i, b[i]);
    hd.Set(i, -1);
  }
  const DeviceBuffer da(ha), db(hb), dd(hd);
  struct Expectation {
    cublasOperation_t ta, tb;
    float d[4];  // column-major
  } const cases[] = {
      // A B = [19 22; 43 50]
      {CUBLAS_OP_N, CUBLAS_OP_N, {19, 43, 22, 50}},
      // A^T B = [1 3; 2 4][5 6; 7 8] = [26 30; 38 44]
      {CUBLAS_OP_T, CUBLAS_OP_N, {26, 38, 30, 44}},
      // A B^T = [1 2; 3 4][5 7; 6 8] = [17 23; 39 53]
      {CUBLAS_OP_N, CUBLAS_OP_T, {17, 39, 23, 53}},
  };
  for (const Expectation& e : cases) {
    LtPlan plan;
    ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, e.ta), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, e.tb), CUBLAS_STATUS_SUCCESS);
    for (cublasLtMatrixLayout_t* l : {&plan.a, &plan.b, &plan.d}) {
      ASSERT_EQ(cublasLtMatrixLayoutCreate(l, CUDA_R_32F, 2, 2, 2), CUBLAS_STATUS_SUCCESS);
    }
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                             plan.pref, 1, &result, &found),
              CUBLAS_STATUS_SUCCESS);
    const float alpha = 1, beta = 0;
    ASSERT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &beta,
                             dd.get(), plan.d, dd.get(), plan.d, &result.algo, nullptr, 0, nullptr),
              CUBLAS_STATUS_SUCCESS);
    HostBuffer got(CUDA_R_32F, 4);
    dd.CopyTo(&got);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.Get(i), e.d[i]) << "element " << i;
  }
  // GELU(1) in the tanh form is 0.8411919906 (the erf form gives 0.8413447461); GELU(-1) is
  // -0.1588080094.
  HostBuffer one(CUDA_R_32F, 2), two(CUDA_R_32F, 1);
  one.Set(0, 1);
  one.Set(1, -1);
  two.Set(0, 1);
  const DeviceBuffer d1(one), d2(two), dout(one);
  LtPlan plan;
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, 2, 1, 2), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_32F, 1, 1, 1), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_32F, 2, 1, 2), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1, beta = 0;
  ASSERT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, d1.get(), plan.a, d2.get(), plan.b, &beta,
                           nullptr, nullptr, dout.get(), plan.d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  HostBuffer got(CUDA_R_32F, 2);
  dout.CopyTo(&got);
  EXPECT_NEAR(got.Get(0), 0.8411919906, 1e-6);
  EXPECT_NEAR(got.Get(1), -0.1588080094, 1e-6);
}

TEST_F(LtTest, HeuristicReturnsOneAlgorithmWithoutWorkspace) {
  LtPlan plan;
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  for (cublasLtMatrixLayout_t* l : {&plan.a, &plan.b, &plan.d}) {
    ASSERT_EQ(cublasLtMatrixLayoutCreate(l, CUDA_R_16BF, 8, 8, 8), CUBLAS_STATUS_SUCCESS);
  }
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{1} << 20),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t results[4] = {};
  int found = -1;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 4, results, &found),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(found, 1);
  EXPECT_EQ(results[0].state, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(results[0].workspaceSize, 0u);
}

// Attributes and values the emulation does not implement, and malformed attribute calls.
TEST_F(LtTest, RejectsUnimplementedAttributesAndBadSizes) {
  LtPlan plan;
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
  const cublasStatus_t kInvalid = CUBLAS_STATUS_INVALID_VALUE;
  // Matmul descriptor.
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_FILL_MODE, int32_t{CUBLAS_FILL_MODE_FULL}),
            kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, static_cast<void*>(nullptr)),
            kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_RELU)),
            kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_DGELU_BGRAD)),
            kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, int64_t{CUBLAS_OP_T}), kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_CONJG}), kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSC, int32_t{CUBLAS_OP_T}), kInvalid);
  EXPECT_EQ(
      SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, int32_t{CUBLASLT_POINTER_MODE_DEVICE}),
      kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int32_t{8}), kInvalid);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
            kInvalid);
  // A layout is not a matmul descriptor.
  EXPECT_EQ(SetDesc(reinterpret_cast<cublasLtMatmulDesc_t>(plan.a), CUBLASLT_MATMUL_DESC_TRANSA,
                    int32_t{CUBLAS_OP_T}),
            kInvalid);
  // Accepted values, for contrast.
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8}),
            CUBLAS_STATUS_SUCCESS);
  // Layout.
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_ORDER, int32_t{CUBLASLT_ORDER_ROW}), kInvalid);
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, int64_t{0}), kInvalid);
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_ROWS, uint32_t{4}), kInvalid);
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int64_t{2}), kInvalid);
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{2}),
            CUBLAS_STATUS_SUCCESS);
  // Preference.
  EXPECT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE,
                    uint32_t{CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID}),
            kInvalid);
  EXPECT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint64_t{16}), kInvalid);
  EXPECT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint32_t{16}), kInvalid);
  EXPECT_EQ(SetPref(plan.pref, static_cast<cublasLtMatmulPreferenceAttributes_t>(10), uint32_t{0}),
            kInvalid);
}

// A problem the heuristic (and the matmul) must refuse, built from a valid f32 one by `edit`.
struct Refusal {
  const char* what;
  cublasStatus_t status;
  void (*edit)(LtPlan* plan);
};

TEST_F(LtTest, RefusesInconsistentOrUnsupportedProblems) {
  const Refusal refusals[] = {
      {"A's rows are not D's", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) { SetLayout(p->a, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t{5}); }},
      {"B's rows are not A's cols", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) { SetLayout(p->b, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t{7}); }},
      {"transposed A no longer fits", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) { SetDesc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}); }},
      {"ld below rows", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) { SetLayout(p->a, CUBLASLT_MATRIX_LAYOUT_LD, int64_t{3}); }},
      {"C's shape is not D's", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) { SetLayout(p->c, CUBLASLT_MATRIX_LAYOUT_COLS, uint64_t{5}); }},
      {"batch counts differ", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) { SetLayout(p->b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{2}); }},
      {"batch count 0", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) {
         for (cublasLtMatrixLayout_t l : {p->a, p->b, p->c, p->d}) {
           SetLayout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{0});
         }
       }},
      {"aux ld not a multiple of 8", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) {
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                 static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX));
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{12});
       }},
      {"aux ld below D's rows", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) {
         for (cublasLtMatrixLayout_t l : {p->a, p->c, p->d}) {
           SetLayout(l, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t{16});
           SetLayout(l, CUBLASLT_MATRIX_LAYOUT_LD, int64_t{16});
         }
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                 static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX_BIAS));
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
       }},
      {"aux ld unset", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) {
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                 static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX));
       }},
      {"aux batch stride not a multiple of 8", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) {
         for (cublasLtMatrixLayout_t l : {p->a, p->b, p->c, p->d}) {
           SetLayout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{2});
         }
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                 static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX));
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, int64_t{36});
       }},
      {"f16 A with bf16 D", CUBLAS_STATUS_NOT_SUPPORTED,
       [](LtPlan* p) {
         SetLayout(p->a, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16F});
         SetLayout(p->b, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16F});
         SetLayout(p->c, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF});
         SetLayout(p->d, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF});
       }},
      {"f32 A with bf16 D", CUBLAS_STATUS_NOT_SUPPORTED,
       [](LtPlan* p) {
         SetLayout(p->c, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF});
         SetLayout(p->d, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF});
       }},
      {"A and B of different types", CUBLAS_STATUS_NOT_SUPPORTED,
       [](LtPlan* p) { SetLayout(p->b, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF}); }},
      {"C of another type than D", CUBLAS_STATUS_INVALID_VALUE,
       [](LtPlan* p) { SetLayout(p->c, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF}); }},
      {"f64 compute", CUBLAS_STATUS_NOT_SUPPORTED,
       [](LtPlan* p) {
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, int32_t{CUBLAS_COMPUTE_64F});
       }},
      {"f16 scale", CUBLAS_STATUS_NOT_SUPPORTED,
       [](LtPlan* p) { SetDesc(p->desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, int32_t{CUDA_R_16F}); }},
      {"bias type other than D's", CUBLAS_STATUS_NOT_SUPPORTED,
       [](LtPlan* p) {
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                 static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_16BF});
       }},
      {"aux type other than D's", CUBLAS_STATUS_NOT_SUPPORTED,
       [](LtPlan* p) {
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                 static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX));
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t{CUDA_R_16F});
       }},
      {"A promised 2-byte aligned (f32)", CUBLAS_STATUS_NOT_SUPPORTED,
       [](LtPlan* p) {
         SetPref(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t{2});
       }},
      {"bias pointer 2-byte aligned (f32)", CUBLAS_STATUS_NOT_SUPPORTED,
       [](LtPlan* p) {
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                 static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
         SetDesc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                 reinterpret_cast<const void*>(uintptr_t{0x1002}));
       }},
  };
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.what);
    // D = A B with A 4 x 6, B 6 x 4 (f32).
    LtPlan plan;
    ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, 4, 6, 4), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_32F, 6, 4, 6), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
    r.edit(&plan);
    cublasLtMatmulHeuristicResult_t result{};
    int found = -1;
    EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.d,
                                             plan.pref, 1, &result, &found),
              r.status);
    EXPECT_EQ(found, 0);
    // cublasLtMatmul checks the problem the same way (no device memory is touched first).
    if (r.status == CUBLAS_STATUS_INVALID_VALUE) {
      const float alpha = 1, beta = 0;
      EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, nullptr, plan.a, nullptr, plan.b, &beta,
                               nullptr, plan.c, nullptr, plan.d, nullptr, nullptr, 0, nullptr),
                r.status);
    }
  }
}

TEST_F(LtTest, RefusesBadCallArguments) {
  LtPlan plan;
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  for (cublasLtMatrixLayout_t* l : {&plan.a, &plan.b, &plan.d}) {
    ASSERT_EQ(cublasLtMatrixLayoutCreate(l, CUDA_R_32F, 8, 8, 8), CUBLAS_STATUS_SUCCESS);
  }
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, 8, 8, 16), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 0, &result, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           nullptr, 1, &result, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(nullptr, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 1, &result, &found),
            CUBLAS_STATUS_NOT_INITIALIZED);
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 1, &result, &found),
            CUBLAS_STATUS_SUCCESS);
  HostBuffer h(CUDA_R_32F, 16 * 8 + 256);
  std::mt19937 rng(7);
  h.Fill(&rng);
  const DeviceBuffer da(h), db(h), dd(h), work(h);
  const float alpha = 1, beta = 1;
  const float zero = 0;
  // The workspace must be 256-byte aligned.
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &beta,
                           dd.get(), plan.d, dd.get(), plan.d, &result.algo,
                           static_cast<char*>(work.get()) + 16, 1024, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // In place (C == D) needs C's layout to be D's.
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &beta,
                           dd.get(), plan.c, dd.get(), plan.d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // No alpha.
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, nullptr, da.get(), plan.a, db.get(), plan.b, &beta,
                           dd.get(), plan.d, dd.get(), plan.d, &result.algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // An algorithm chosen for another epilogue.
  ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &zero,
                           dd.get(), plan.d, dd.get(), plan.d, &result.algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // A bias epilogue without a bias pointer.
  ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &zero,
                           dd.get(), plan.d, dd.get(), plan.d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // Nothing was written by the refused calls.
  HostBuffer got(CUDA_R_32F, h.count());
  dd.CopyTo(&got);
  EXPECT_EQ(got.bytes(), h.bytes());
}

// What would fault on a GPU stops the process.
TEST_F(LtTest, HostPointerOrMisalignedPointerDies) {
  LtPlan plan;
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  for (cublasLtMatrixLayout_t* l : {&plan.a, &plan.b, &plan.d}) {
    ASSERT_EQ(cublasLtMatrixLayoutCreate(l, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  }
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t{16}),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 1, &result, &found),
            CUBLAS_STATUS_SUCCESS);
  HostBuffer h(CUDA_R_32F, 20);
  std::mt19937 rng(3);
  h.Fill(&rng);
  const DeviceBuffer da(h), db(h), dd(h);
  const float alpha = 1, beta = 0;
  std::vector<float> host(16, 1.0f);
  EXPECT_DEATH(
      cublasLtMatmul(handle_, plan.desc, &alpha, host.data(), plan.a, db.get(), plan.b, &beta,
                     nullptr, plan.d, dd.get(), plan.d, &result.algo, nullptr, 0, nullptr),
      "A .* is not device memory");
  // A 4-byte aligned A under an algorithm chosen for 16-byte alignment.
  EXPECT_DEATH(cublasLtMatmul(handle_, plan.desc, &alpha, static_cast<float*>(da.get()) + 1, plan.a,
                              db.get(), plan.b, &beta, nullptr, plan.d, dd.get(), plan.d,
                              &result.algo, nullptr, 0, nullptr),
               "A .* is 4-byte aligned, but the algorithm was chosen for 16-byte alignment");
  // D runs past its allocation (ld 8 for 4 x 4 needs 28 elements; the buffer has 20).
  ASSERT_EQ(SetLayout(plan.d, CUBLASLT_MATRIX_LAYOUT_LD, int64_t{8}), CUBLAS_STATUS_SUCCESS);
  EXPECT_DEATH(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &beta,
                              nullptr, plan.d, dd.get(), plan.d, nullptr, nullptr, 0, nullptr),
               "D .* runs past its cudaMalloc allocation");
}

// ---- cuBLAS (legacy) ----

class BlasTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cublasDestroy(handle_), CUBLAS_STATUS_SUCCESS); }

  cublasHandle_t handle_ = nullptr;
};

// Runs one case (no epilogue, C in place) through cublasGemmStridedBatchedEx and checks it.
void RunLegacy(cublasHandle_t handle, GemmCase g, uint32_t seed) {
  g.in_place = true;
  g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  SCOPED_TRACE(g.Describe());
  std::mt19937 rng(seed);
  Operands ops(g, &rng);
  if (g.beta == 0.0f) ops.hd.Fill(&rng, /*nan=*/true);  // C is not read
  const DeviceBuffer da(ops.ha), db(ops.hb), dd(ops.hd);
  ASSERT_EQ(cublasSetStream(handle, nullptr), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGemmStridedBatchedEx(
                handle, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.m), static_cast<int>(g.n),
                static_cast<int>(g.k), &g.alpha, da.get(), g.ab, static_cast<int>(ops.a.ld),
                ops.a.stride, db.get(), g.ab, static_cast<int>(ops.b.ld), ops.b.stride, &g.beta,
                dd.get(), g.cd, static_cast<int>(ops.d.ld), ops.d.stride, static_cast<int>(g.batch),
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  HostBuffer d_out(g.cd, ops.d.Elements());
  dd.CopyTo(&d_out);
  ops.Check(g, d_out, ops.haux);
}

TEST_F(BlasTest, GemmStridedBatchedExMatchesFloat64Reference) {
  ForEachProduct(AllSizes(), AllSizes(), AllSizes(), -1.5f, 0.25f, 5000,
                 [&](const GemmCase& g, uint32_t seed) { RunLegacy(handle_, g, seed); });
}

// As in BLAS, alpha = 0 reads neither A nor B: C = beta C even where A is NaN.
TEST_F(BlasTest, AlphaZeroScalesC) {
  HostBuffer nan(CUDA_R_32F, 4), c(CUDA_R_32F, 4);
  for (int i = 0; i < 4; ++i) {
    nan.Set(i, kNaN);
    c.Set(i, i + 1);
  }
  const DeviceBuffer da(nan), dc(c);
  const float alpha = 0, beta = 2;
  ASSERT_EQ(
      cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, da.get(),
                                 CUDA_R_32F, 2, 4, da.get(), CUDA_R_32F, 2, 4, &beta, dc.get(),
                                 CUDA_R_32F, 2, 4, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  HostBuffer got(CUDA_R_32F, 4);
  dc.CopyTo(&got);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.Get(i), 2.0 * (i + 1));
}

TEST_F(BlasTest, GemmStridedBatchedExRefusesBadArguments) {
  HostBuffer h(CUDA_R_32F, 64);
  std::mt19937 rng(11);
  h.Fill(&rng);
  const DeviceBuffer d(h);
  const float alpha = 1, beta = 0;
  // m = n = k = 4 with lda = ldb = ldc = 4 unless changed.
  struct Args {
    cublasHandle_t handle;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    int m = 4, n = 4, k = 4;
    cudaDataType_t at = CUDA_R_32F, bt = CUDA_R_32F, ct = CUDA_R_32F;
    int lda = 4, ldb = 4, ldc = 4, batch = 1;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT;
    const float* alpha_p;
  };
  auto call = [&](const Args& a) {
    return cublasGemmStridedBatchedEx(a.handle, a.ta, a.tb, a.m, a.n, a.k, a.alpha_p, d.get(), a.at,
                                      a.lda, 16, d.get(), a.bt, a.ldb, 16, &beta, d.get(), a.ct,
                                      a.ldc, 16, a.batch, a.compute, a.algo);
  };
  Args base;
  base.handle = handle_;
  base.alpha_p = &alpha;
  Args x = base;
  x.handle = nullptr;
  EXPECT_EQ(call(x), CUBLAS_STATUS_NOT_INITIALIZED);
  x = base;
  x.m = -1;
  EXPECT_EQ(call(x), CUBLAS_STATUS_INVALID_VALUE);
  x = base;
  x.batch = -1;
  EXPECT_EQ(call(x), CUBLAS_STATUS_INVALID_VALUE);
  x = base;
  x.lda = 3;  // < m
  EXPECT_EQ(call(x), CUBLAS_STATUS_INVALID_VALUE);
  x = base;
  x.ta = CUBLAS_OP_T;
  x.k = 5;
  x.ldb = 5;
  x.lda = 4;  // < k for a transposed A
  EXPECT_EQ(call(x), CUBLAS_STATUS_INVALID_VALUE);
  x = base;
  x.tb = CUBLAS_OP_T;
  x.n = 5;
  x.ldc = 4;
  x.ldb = 4;  // < n for a transposed B
  EXPECT_EQ(call(x), CUBLAS_STATUS_INVALID_VALUE);
  x = base;
  x.ldc = 2;
  EXPECT_EQ(call(x), CUBLAS_STATUS_INVALID_VALUE);
  x = base;
  x.ta = CUBLAS_OP_CONJG;
  EXPECT_EQ(call(x), CUBLAS_STATUS_INVALID_VALUE);
  x = base;
  x.alpha_p = nullptr;
  EXPECT_EQ(call(x), CUBLAS_STATUS_INVALID_VALUE);
  x = base;
  x.algo = static_cast<cublasGemmAlgo_t>(50);
  EXPECT_EQ(call(x), CUBLAS_STATUS_INVALID_VALUE);
  x = base;
  x.bt = CUDA_R_16BF;
  EXPECT_EQ(call(x), CUBLAS_STATUS_NOT_SUPPORTED);
  x = base;
  x.ct = CUDA_R_16BF;
  EXPECT_EQ(call(x), CUBLAS_STATUS_NOT_SUPPORTED);
  x = base;
  x.compute = CUBLAS_COMPUTE_64F;
  EXPECT_EQ(call(x), CUBLAS_STATUS_NOT_SUPPORTED);
  x = base;
  x.at = x.bt = CUDA_R_64F;
  x.ct = CUDA_R_64F;
  EXPECT_EQ(call(x), CUBLAS_STATUS_NOT_SUPPORTED);
  // Nothing was written.
  HostBuffer got(CUDA_R_32F, 64);
  d.CopyTo(&got);
  EXPECT_EQ(got.bytes(), h.bytes());
  EXPECT_EQ(cublasSetStream(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST(BlasStatusTest, NamesAndStrings) {
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasGetStatusName(static_cast<cublasStatus_t>(12345)), "CUBLAS_STATUS_UNKNOWN");
  for (cublasStatus_t s :
       {CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_ALLOC_FAILED,
        CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_ARCH_MISMATCH, CUBLAS_STATUS_MAPPING_ERROR,
        CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_INTERNAL_ERROR, CUBLAS_STATUS_NOT_SUPPORTED,
        CUBLAS_STATUS_LICENSE_ERROR}) {
    EXPECT_NE(std::string(cublasGetStatusString(s)), "") << s;
    EXPECT_NE(std::string(cublasGetStatusName(s)), "CUBLAS_STATUS_UNKNOWN") << s;
  }
}

}  // namespace
}  // namespace cuda_emu
}  // namespace mt
