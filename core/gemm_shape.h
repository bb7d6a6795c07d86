// The shape of a (batched) GEMM, shared by the CPU ops and the CUDA backend: `batch` independent
// products C[m, n] = op(A) op(B), op(A) [m, k], op(B) [k, n], op transposing when trans_*.
#ifndef MT_CORE_GEMM_SHAPE_H_
#define MT_CORE_GEMM_SHAPE_H_

#include <cstdint>

namespace mt {

struct GemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
};

}  // namespace mt

#endif  // MT_CORE_GEMM_SHAPE_H_
