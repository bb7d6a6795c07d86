#include "core/cuda/ops_cuda.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "core/cuda/launchers.h"

namespace mt {
namespace cuda {

namespace {
absl::Status LaunchStatus(int err, const char* what) {
  if (err == 0) return absl::OkStatus();
  const auto e = static_cast<cudaError_t>(err);
  return absl::InternalError(absl::StrCat(what, " kernel launch failed: ", cudaGetErrorName(e),
                                          " (", cudaGetErrorString(e), ")"));
}

ElemType ToElemType(DType d) {
  return d == DType::kBF16 ? ElemType::kBF16 : d == DType::kF16 ? ElemType::kF16 : ElemType::kF32;
}
}  // namespace

absl::Status BiasAdd(const ExecContext& ctx, const TensorView& x, const TensorView& bias,
                     const TensorView& y) {
  const int64_t cols = bias.numel();
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  return LaunchStatus(LaunchBiasAdd(ToElemType(x.dtype), x.data, bias.data, y.data, rows, cols,
                                    ctx.cuda_stream),
                      "BiasAdd");
}

}  // namespace cuda
}  // namespace mt
