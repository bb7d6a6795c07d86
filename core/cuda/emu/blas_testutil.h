// Fixtures for the tests of the emulated cuBLAS / cuBLASLt (blas_*_test.cc): host and device
// buffers of f32 / f16 / bf16 elements, batches of column-major matrices with padded leading
// dimensions and batch strides, a GEMM case with its float64 reference and tolerance, the sweep
// over types, sizes, transposes and batch counts, and the cuBLASLt calls that run one case.
// Everything goes through the C API only, with device memory from the emulator's cudaMalloc.
// testonly.
#ifndef MT_CORE_CUDA_EMU_BLAS_TESTUTIL_H_
#define MT_CORE_CUDA_EMU_BLAS_TESTUTIL_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace cuda_emu {
namespace blas_testing {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Unit roundoff of f32, f16 or bf16.
double UnitRoundoff(cudaDataType_t type);
// Half the spacing of the type's subnormals: the absolute rounding error near zero.
double SubnormalRoundoff(cudaDataType_t type);
size_t TypeSize(cudaDataType_t type);
const char* TypeName(cudaDataType_t type);

// Host elements of one type; values go in and out as doubles (rounded to nearest on the way in).
class HostBuffer {
 public:
  HostBuffer(cudaDataType_t type, int64_t count)
      : type_(type), bytes_(static_cast<size_t>(count) * TypeSize(type)) {}

  void Set(int64_t i, double v);
  double Get(int64_t i) const;
  // Every element uniform in [-1, 1] (rounded to the type), or NaN.
  void Fill(std::mt19937* rng, bool nan = false);
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
  explicit DeviceBuffer(const HostBuffer& host);
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  void CopyTo(HostBuffer* host) const;

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
Shape MakeShape(int64_t rows, int64_t cols, int64_t batch, int64_t ld_pad, int64_t stride_pad);

// The largest power of two (at most 256) dividing the pointer and the batch stride in bytes.
uint32_t Alignment(const void* p, int64_t batch, int64_t stride_bytes);

// The tanh form of GeLU, in double.
double GeluTanh(double x);

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
  std::string Describe() const;
};

// The operands of a case, filled with random values (C with NaN where beta = 0 and C is not D).
struct Operands {
  Shape a, b, c, d, aux;
  int64_t bias_stride = 0;
  HostBuffer ha, hb, hc, hd, hbias, haux;

  Operands(const GemmCase& g, std::mt19937* rng);

  // The input of D's epilogue function (after alpha, beta and the bias) in float64, and a bound on
  // the error of float accumulation and scaling.
  void Reference(const GemmCase& g, int64_t bi, int64_t i, int64_t j, const HostBuffer& c_in,
                 double* x, double* err) const;

  // Compares D (and the aux output) with the reference and checks nothing outside the matrices
  // was written.
  void Check(const GemmCase& g, const HostBuffer& d_out, const HostBuffer& aux_out) const;
};

struct TypePair {
  cudaDataType_t ab, cd;
};
constexpr TypePair kTypePairs[] = {{CUDA_R_32F, CUDA_R_32F},
                                   {CUDA_R_16BF, CUDA_R_16BF},
                                   {CUDA_R_16F, CUDA_R_16F},
                                   {CUDA_R_16BF, CUDA_R_32F},
                                   {CUDA_R_16F, CUDA_R_32F}};
// 1, 3, 17, 33.
std::vector<int64_t> AllSizes();

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

// ---- cuBLASLt ----

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
  ~LtPlan();
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

// Descriptors for D = A B with A, B and D n x n and packed, of `type` (C: none; pass plan->d for
// it), without transposes or epilogue, and a default preference.
void MakeSquarePlan(LtPlan* plan, cudaDataType_t type, int64_t n);

// A layout of `type` for the matrices of `s`.
void MakeLayout(cublasLtMatrixLayout_t* l, cudaDataType_t type, const Shape& s);

// Runs one case through cuBLASLt (the heuristic's algorithm) and checks it.
void RunLt(cublasLtHandle_t handle, const GemmCase& g, uint32_t seed);

}  // namespace blas_testing
}  // namespace cuda_emu
}  // namespace mt

#endif  // MT_CORE_CUDA_EMU_BLAS_TESTUTIL_H_
