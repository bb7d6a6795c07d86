// Fixtures for the emulated cuBLAS / cuBLASLt tests (blas_testutil.h).
#include "core/cuda/emu/blas_testutil.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <iterator>

namespace mt {
namespace cuda_emu {
namespace blas_testing {

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

void HostBuffer::Set(int64_t i, double v) {
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

double HostBuffer::Get(int64_t i) const {
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

void HostBuffer::Fill(std::mt19937* rng, bool nan) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (int64_t i = 0; i < count(); ++i) Set(i, nan ? kNaN : dist(*rng));
}

DeviceBuffer::DeviceBuffer(const HostBuffer& host) : bytes_(host.bytes().size()) {
  EXPECT_EQ(cudaMalloc(&ptr_, bytes_ == 0 ? 1 : bytes_), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(ptr_, host.bytes().data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
}

void DeviceBuffer::CopyTo(HostBuffer* host) const {
  ASSERT_EQ(host->bytes().size(), bytes_);
  ASSERT_EQ(cudaMemcpy(host->bytes().data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
}

Shape MakeShape(int64_t rows, int64_t cols, int64_t batch, int64_t ld_pad, int64_t stride_pad) {
  Shape s;
  s.rows = rows;
  s.cols = cols;
  s.ld = rows + ld_pad;
  s.batch = batch;
  s.stride = batch > 1 ? s.ld * cols + stride_pad : 0;
  return s;
}

uint32_t Alignment(const void* p, int64_t batch, int64_t stride_bytes) {
  uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) | 256u;
  if (batch > 1) bits |= static_cast<uint64_t>(stride_bytes);
  return static_cast<uint32_t>(bits & (~bits + 1));
}

double GeluTanh(double x) {
  const double kSqrt2OverPi = std::sqrt(2.0 / std::acos(-1.0));
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

namespace {

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

}  // namespace

std::string GemmCase::Describe() const {
  return std::string(TypeName(ab)) + "->" + TypeName(cd) + " m=" + std::to_string(m) +
         " n=" + std::to_string(n) + " k=" + std::to_string(k) + (trans_a ? " T" : " N") +
         (trans_b ? "T" : "N") + " batch=" + std::to_string(batch) +
         " epilogue=" + std::to_string(epilogue) + " alpha=" + std::to_string(alpha) +
         " beta=" + std::to_string(beta) + (in_place ? " in-place" : "");
}

Operands::Operands(const GemmCase& g, std::mt19937* rng)
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

void Operands::Reference(const GemmCase& g, int64_t bi, int64_t i, int64_t j,
                         const HostBuffer& c_in, double* x, double* err) const {
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

void Operands::Check(const GemmCase& g, const HostBuffer& d_out, const HostBuffer& aux_out) const {
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

std::vector<int64_t> AllSizes() { return {1, 3, 17, 33}; }

LtPlan::~LtPlan() {
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  if (c != d) cublasLtMatrixLayoutDestroy(c);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatmulDescDestroy(desc);
}

void MakeSquarePlan(LtPlan* plan, cudaDataType_t type, int64_t n) {
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  for (cublasLtMatrixLayout_t* l : {&plan->a, &plan->b, &plan->d}) {
    ASSERT_EQ(
        cublasLtMatrixLayoutCreate(l, type, static_cast<uint64_t>(n), static_cast<uint64_t>(n), n),
        CUBLAS_STATUS_SUCCESS);
  }
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan->pref), CUBLAS_STATUS_SUCCESS);
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

namespace {

// The epilogue of `g` on `desc`, with its bias and aux matrices.
void SetEpilogue(cublasLtMatmulDesc_t desc, const GemmCase& g, const Operands& ops,
                 const void* bias, void* aux) {
  ASSERT_EQ(SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(g.epilogue)),
            CUBLAS_STATUS_SUCCESS);
  if (g.bias()) {
    ASSERT_EQ(SetDesc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(SetDesc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(g.cd)),
              CUBLAS_STATUS_SUCCESS);
    if (g.batch > 1) {
      ASSERT_EQ(SetDesc(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, ops.bias_stride),
                CUBLAS_STATUS_SUCCESS);
    }
  }
  if (g.aux()) {
    ASSERT_EQ(SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ops.aux.ld),
              CUBLAS_STATUS_SUCCESS);
    if (g.batch > 1) {
      ASSERT_EQ(SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, ops.aux.stride),
                CUBLAS_STATUS_SUCCESS);
    }
  }
}

// Promises, on `pref`, the alignments the pointers and batch strides really have, as a caller
// would, and no workspace.
void PromiseAlignments(cublasLtMatmulPreference_t pref, const GemmCase& g, const Operands& ops,
                       const void* a, const void* b, const void* c, const void* d) {
  const int64_t ab_size = static_cast<int64_t>(TypeSize(g.ab));
  const int64_t cd_size = static_cast<int64_t>(TypeSize(g.cd));
  ASSERT_EQ(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    Alignment(a, g.batch, ops.a.stride * ab_size)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    Alignment(b, g.batch, ops.b.stride * ab_size)),
            CUBLAS_STATUS_SUCCESS);
  const Shape& cs = g.in_place ? ops.d : ops.c;
  ASSERT_EQ(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    Alignment(c, g.batch, cs.stride * cd_size)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                    Alignment(d, g.batch, ops.d.stride * cd_size)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetPref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{0}),
            CUBLAS_STATUS_SUCCESS);
}

}  // namespace

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
  SetEpilogue(plan.desc, g, ops, dbias.get(), daux.get());
  if (::testing::Test::HasFatalFailure()) return;
  MakeLayout(&plan.a, g.ab, ops.a);
  MakeLayout(&plan.b, g.ab, ops.b);
  MakeLayout(&plan.d, g.cd, ops.d);
  if (g.in_place) {
    plan.c = plan.d;
  } else {
    MakeLayout(&plan.c, g.cd, ops.c);
  }
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
  PromiseAlignments(plan.pref, g, ops, da.get(), db.get(), c_ptr, dd.get());
  if (::testing::Test::HasFatalFailure()) return;
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

}  // namespace blas_testing
}  // namespace cuda_emu
}  // namespace mt
