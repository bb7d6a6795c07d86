// Test support for running a model on a GPU next to the same model on the CPU: a cuda:0 context
// (or the reason there is none, for GTEST_SKIP), comparisons of two parameter stores (one may
// live on the GPU) declared by the same model, and CpuAndGpuModel, the harness of the model
// families' GPU tests. testonly.
#ifndef MT_MODELS_TESTING_CUDA_MODEL_TESTUTIL_H_
#define MT_MODELS_TESTING_CUDA_MODEL_TESTUTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cuda/device_context.h"
#include "core/exec_context.h"
#include "core/thread_pool.h"
#include "models/config.h"
#include "models/model.h"
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

// ---- One model on the CPU and on a GPU (the family GPU tests' harness)

// The small model the GPU tests run: 2 layers, hidden 32, 4 heads, 16 positions, `vocab_size`
// padded to a multiple of 8, dropout 0.1 (hidden and attention), init std 0.2; BERT with 2 token
// types.
ModelConfig SmallGpuTestConfig(Family family, int64_t vocab_size);

// How far a GPU run may lie from a CPU run of the same model in compute dtype dt: the loss
// relative to the CPU loss, each gradient norm-wise per tensor. f32 differs only by the order of
// the sums inside the ops (cuBLAS vs Eigen, block reductions); 16-bit compute by which
// intermediate results round up or down, which the mixed-precision tests bound by 16 u (loss) and
// 32 u (gradients) against f32 (gpt2_test.cc) -- the same bounds hold between two 16-bit runs
// whose errors are each well inside them.
double GpuLossBound(DType dt);
double GpuGradBound(DType dt);
// The loss scale training uses with compute dtype dt: 1024 for f16, 1 otherwise.
double TrainingLossScale(DType dt);

// Copies of the non-empty views of `host` on ec's device; `storage` keeps the tensors.
absl::StatusOr<Batch> UploadBatch(const ExecContext& ec, const Batch& host,
                                  std::vector<Tensor>* storage);

// One model built twice from the same config, options and seed, in stores of compute dtype
// `dtype`: on the CPU (a pool of three threads) and on cuda:0 (`gpu`). Construction EXPECTs that
// the initial masters agree bit for bit, then loads NonTrivialMasters(masters_seed) into both. A
// failure is recorded as a test failure and leaves ok() false. Steps run with the loss scale
// TrainingLossScale(dtype) and compare within GpuLossBound / GpuGradBound.
class CpuAndGpuModel {
 public:
  CpuAndGpuModel(const GpuContext& gpu, const ModelConfig& config, const ModelOptions& options,
                 DType dtype, uint64_t seed, uint64_t masters_seed);

  bool ok() const { return ok_; }
  Model& cpu() { return *cpu_model_; }
  Model& gpu() { return *gpu_model_; }
  const ExecContext& cpu_exec() const { return cpu_exec_; }
  const ExecContext& gpu_exec() const { return gpu_exec_; }

  // Zeroes both stores' gradients; false (recorded) on failure.
  bool ZeroGrads();
  // ForwardBackward (Backward::kYes) of the CPU model on `cpu_batch` and of the GPU model on
  // `gpu_batch` (the same values, on the host or uploaded), each with `sc` on its own exec: prints
  // and EXPECTs every loss part and the total, then every gradient. false if a step failed.
  bool ExpectStepsMatch(const nn::StepContext& sc, const Batch& cpu_batch, const Batch& gpu_batch,
                        const std::string& what);
  // MultipleChoice likewise: the loss, the number of predictions, the predictions themselves in
  // f32 (16-bit scores of close choices may rank differently), and the gradients but `skip`.
  bool ExpectMultipleChoiceMatches(const nn::StepContext& sc, const Batch& cpu_batch,
                                   const Batch& gpu_batch, const std::string& what,
                                   const std::vector<std::string>& skip = {});

 private:
  bool Check(const absl::Status& s, const std::string& what);
  void ExpectLossClose(double gpu, double cpu, const std::string& what) const;
  nn::StepContext On(const nn::StepContext& sc, const ExecContext& ec) const;

  DType dtype_;
  double scale_;
  ThreadPool pool_{3};
  ExecContext cpu_exec_;
  const ExecContext& gpu_exec_;
  nn::ParameterStore cpu_store_, gpu_store_;
  std::unique_ptr<Model> cpu_model_, gpu_model_;
  bool ok_ = false;
};

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_TESTING_CUDA_MODEL_TESTUTIL_H_
