// Test support for running a model on a GPU next to the same model on the CPU: a cuda:0 context
// (or the reason there is none, for GTEST_SKIP), and comparisons of two parameter stores (one may
// live on the GPU) declared by the same model. testonly.
#ifndef MT_MODELS_TESTING_CUDA_MODEL_TESTUTIL_H_
#define MT_MODELS_TESTING_CUDA_MODEL_TESTUTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cuda/device_context.h"
#include "core/exec_context.h"
#include "nn/parameter.h"

namespace mt {
namespace models {
namespace testing {

// An ExecContext on cuda:0 (device, stream = the default stream, and a DeviceContext).
struct GpuContext {
  std::unique_ptr<cuda::DeviceContext> device_context;
  ExecContext exec;
};
// FailedPrecondition naming the reason (cuda::Describe()) when there is no GPU.
absl::StatusOr<std::unique_ptr<GpuContext>> MakeGpuContext();

// The masters of a CPU `store` as a host flat tensor (f32 [NumLocalElements()]) in which every
// parameter not initialised from a normal distribution (LayerNorm gammas/betas, biases) holds
// uniform values in [0.5, 1.5) instead, so that none is trivial; load it into the stores to
// compare with CopyValuesFromHost.
Tensor NonTrivialMasters(const nn::ParameterStore& store, uint64_t seed);

// ||a - b||_2 / ||b||_2 (0 when both are zero; infinite when only b is).
double RelativeError(const std::vector<double>& a, const std::vector<double>& b);

// Every parameter's gradient (or value) of `got` (any device; copied to the host through
// got_ctx), divided by `scale`, as doubles, in handle order.
std::vector<std::vector<double>> HostGrads(const nn::ParameterStore& got,
                                           const ExecContext& got_ctx, double scale = 1.0);
std::vector<std::vector<double>> HostValues(const nn::ParameterStore& got,
                                            const ExecContext& got_ctx);

// EXPECTs, for every parameter of `want` (a CPU store with the same declarations as `got`), that
// the norm-wise relative error of got's gradient / got_scale against want's / want_scale is at
// most `bound`. A tensor whose reference gradient is tiny next to the largest one (norm below
// 1e-6 of it) is compared against that largest norm instead. Parameters named in `skip` are not
// compared. Prints the worst error, labelled `what`.
void ExpectGradsClose(const nn::ParameterStore& got, const ExecContext& got_ctx, double got_scale,
                      const nn::ParameterStore& want, double want_scale, double bound,
                      const std::string& what, const std::vector<std::string>& skip = {});

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_TESTING_CUDA_MODEL_TESTUTIL_H_
