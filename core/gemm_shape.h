// The shape of a (batched) GEMM, shared by the CPU ops and the CUDA backend: `batch` independent
// products C[m, n] = op(A) op(B), op(A) [m, k], op(B) [k, n], op transposing when trans_*.
#ifndef MT_CORE_GEMM_SHAPE_H_
#define MT_CORE_GEMM_SHAPE_H_

#include <cstdint>

namespace mt {

struct GemmShape {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool trans_a = false;
  bool trans_b = false;
};

}  // namespace mt

#endif  // MT_CORE_GEMM_SHAPE_H_
