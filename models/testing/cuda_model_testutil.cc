#include "models/testing/cuda_model_testutil.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/cuda_device.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "models/multiple_choice.h"
#include "models/registry.h"

namespace mt {
namespace models {
namespace testing {

absl::StatusOr<std::unique_ptr<GpuContext>> MakeGpuContext() {
  if (cuda::DeviceCount() == 0) return absl::FailedPreconditionError(cuda::Describe());
  auto g = std::make_unique<GpuContext>();
  absl::StatusOr<std::unique_ptr<cuda::DeviceContext>> dc = cuda::DeviceContext::Create(0);
  if (!dc.ok()) return dc.status();
  g->device_context = std::move(dc).value();
  g->exec.cuda = g->device_context.get();
  g->exec.device = Device::Cuda(0);
  return g;
}

Tensor NonTrivialMasters(const nn::ParameterStore& store, uint64_t seed) {
  absl::StatusOr<Tensor> flat = store.CopyValuesToHost(ExecContext{});
  if (!flat.ok()) {
    ADD_FAILURE() << "NonTrivialMasters: copying the masters failed: " << flat.status();
    return Tensor();
  }
  for (int i = 0; i < store.size(); ++i) {
    if (store.spec(i).init == nn::Init::kNormal) continue;
    Tensor r = ::mt::testing::RandomTensor(store.value(i).shape, DType::kF32, seed + i, 0.5, 1.5);
    std::memcpy(static_cast<float*>(flat->data()) + store.offset(i), r.data(), r.nbytes());
  }
  return std::move(flat).value();
}

double RelativeError(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    n += b[i] * b[i];
  }
  if (n == 0) return d == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(d / n);
}

namespace {

std::vector<std::vector<double>> Split(const nn::ParameterStore& store, const Tensor& flat,
                                       double scale) {
  std::vector<std::vector<double>> out;
  for (int i = 0; i < store.size(); ++i) {
    const TensorView v(static_cast<float*>(flat.data()) + store.offset(i), store.value(i).shape,
                       DType::kF32);
    std::vector<double> d = ::mt::testing::ToDoubles(v);
    for (double& x : d) x /= scale;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

std::vector<std::vector<double>> HostGrads(const nn::ParameterStore& got,
                                           const ExecContext& got_ctx, double scale) {
  absl::StatusOr<Tensor> flat = got.CopyGradsToHost(got_ctx);
  EXPECT_TRUE(flat.ok()) << flat.status();
  if (!flat.ok()) return {};
  return Split(got, *flat, scale);
}

std::vector<std::vector<double>> HostValues(const nn::ParameterStore& got,
                                            const ExecContext& got_ctx) {
  absl::StatusOr<Tensor> flat = got.CopyValuesToHost(got_ctx);
  EXPECT_TRUE(flat.ok()) << flat.status();
  if (!flat.ok()) return {};
  return Split(got, *flat, 1.0);
}

void ExpectGradsClose(const nn::ParameterStore& got, const ExecContext& got_ctx, double got_scale,
                      const nn::ParameterStore& want, double want_scale, double bound,
                      const std::string& what, const std::vector<std::string>& skip) {
  const ExecContext host;
  const std::vector<std::vector<double>> g = HostGrads(got, got_ctx, got_scale);
  const std::vector<std::vector<double>> w = HostGrads(want, host, want_scale);
  ASSERT_EQ(g.size(), w.size()) << what;
  double largest = 0;
  for (const std::vector<double>& t : w) {
    double n = 0;
    for (double x : t) n += x * x;
    largest = std::max(largest, std::sqrt(n));
  }
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < w.size(); ++i) {
    const std::string& name = want.spec(static_cast<int>(i)).name;
    ASSERT_EQ(g[i].size(), w[i].size()) << name;
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    double d = 0, n = 0;
    for (size_t j = 0; j < w[i].size(); ++j) {
      d += (g[i][j] - w[i][j]) * (g[i][j] - w[i][j]);
      n += w[i][j] * w[i][j];
    }
    const double ref_norm = std::max(std::sqrt(n), 1e-6 * largest);
    const double e = ref_norm == 0 ? (d == 0 ? 0.0 : std::numeric_limits<double>::infinity())
                                   : std::sqrt(d) / ref_norm;
    EXPECT_LE(e, bound) << what << ": " << name;
    if (e >= worst) {
      worst = e;
      worst_name = name;
    }
  }
  std::printf("%s: worst relative gradient error %.3g (%s), bound %.3g\n", what.c_str(), worst,
              worst_name.c_str(), bound);
}

ModelConfig SmallGpuTestConfig(Family family, int64_t vocab_size) {
  ModelConfig c = ModelConfig::Sized(family, 2, 32, 4, vocab_size, /*positions=*/16);
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

double GpuLossBound(DType dt) {
  return dt == DType::kF32 ? 1e-5 : 16 * ::mt::testing::UnitRoundoff(dt);
}
double GpuGradBound(DType dt) {
  return dt == DType::kF32 ? 1e-4 : 32 * ::mt::testing::UnitRoundoff(dt);
}
double TrainingLossScale(DType dt) { return dt == DType::kF16 ? 1024.0 : 1.0; }

absl::StatusOr<Batch> UploadBatch(const ExecContext& ec, const Batch& host,
                                  std::vector<Tensor>* storage) {
  Batch out;
  for (auto [from, to] : {std::pair{&host.tokens, &out.tokens},
                          {&host.labels, &out.labels},
                          {&host.token_types, &out.token_types},
                          {&host.padding_mask, &out.padding_mask},
                          {&host.sop_labels, &out.sop_labels}}) {
    if (from->data == nullptr) continue;
    ASSIGN_OR_RETURN(Tensor t, CopyToDevice(ec, *from));
    *to = t.view();
    storage->push_back(std::move(t));
  }
  return out;
}

CpuAndGpuModel::CpuAndGpuModel(const GpuContext& gpu, const ModelConfig& config,
                               const ModelOptions& options, DType dtype, uint64_t seed,
                               uint64_t masters_seed)
    : dtype_(dtype),
      scale_(TrainingLossScale(dtype)),
      gpu_exec_(gpu.exec),
      cpu_store_(0, 1, dtype),
      gpu_store_(0, 1, dtype, gpu.exec.device) {
  cpu_exec_.pool = &pool_;
  absl::StatusOr<std::unique_ptr<Model>> cm = CreateModel(config, &cpu_store_, options);
  absl::StatusOr<std::unique_ptr<Model>> gm = CreateModel(config, &gpu_store_, options);
  if (!Check(cm.status(), "creating the CPU model") ||
      !Check(gm.status(), "creating the GPU model") ||
      !Check(cpu_store_.Allocate(seed), "allocating the CPU store") ||
      !Check(gpu_store_.Allocate(seed), "allocating the GPU store")) {
    return;
  }
  cpu_model_ = std::move(cm).value();
  gpu_model_ = std::move(gm).value();
  EXPECT_EQ(HostValues(gpu_store_, gpu_exec_), HostValues(cpu_store_, cpu_exec_))
      << "the initial masters differ";
  // Non-trivial LayerNorm and bias masters, loaded into both (compute copies refreshed).
  const Tensor masters = NonTrivialMasters(cpu_store_, masters_seed);
  ok_ =
      Check(cpu_store_.CopyValuesFromHost(cpu_exec_, masters.view()), "loading the CPU masters") &&
      Check(gpu_store_.CopyValuesFromHost(gpu_exec_, masters.view()), "loading the GPU masters");
}

bool CpuAndGpuModel::Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) ADD_FAILURE() << what << ": " << s;
  return s.ok();
}

void CpuAndGpuModel::ExpectLossClose(double gpu, double cpu, const std::string& what) const {
  EXPECT_LE(std::fabs(gpu - cpu), GpuLossBound(dtype_) * std::fabs(cpu))
      << what << ": gpu " << gpu << " cpu " << cpu;
}

nn::StepContext CpuAndGpuModel::On(const nn::StepContext& sc, const ExecContext& ec) const {
  nn::StepContext on = sc;
  on.exec = &ec;
  return on;
}

bool CpuAndGpuModel::ZeroGrads() {
  cpu_store_.ZeroGrads();
  return Check(gpu_store_.ZeroGrads(gpu_exec_), "zeroing the GPU gradients");
}

bool CpuAndGpuModel::ExpectStepsMatch(const nn::StepContext& sc, const Batch& cpu_batch,
                                      const Batch& gpu_batch, const std::string& what) {
  auto lc = cpu_model_->ForwardBackward(On(sc, cpu_exec_), cpu_batch, Backward::kYes, scale_);
  auto lg = gpu_model_->ForwardBackward(On(sc, gpu_exec_), gpu_batch, Backward::kYes, scale_);
  if (!Check(lc.status(), what + ": the CPU step") ||
      !Check(lg.status(), what + ": the GPU step")) {
    return false;
  }
  EXPECT_EQ(lg->parts.size(), lc->parts.size()) << what;
  for (size_t k = 0; k < lc->parts.size() && k < lg->parts.size(); ++k) {
    std::printf("%s: loss part %zu cpu %.9g gpu %.9g\n", what.c_str(), k, lc->parts[k],
                lg->parts[k]);
    ExpectLossClose(lg->parts[k], lc->parts[k], absl::StrCat(what, " loss part ", k));
  }
  ExpectLossClose(lg->total, lc->total, what + " total loss");
  ExpectGradsClose(gpu_store_, gpu_exec_, scale_, cpu_store_, scale_, GpuGradBound(dtype_), what);
  return true;
}

bool CpuAndGpuModel::ExpectMultipleChoiceMatches(const nn::StepContext& sc, const Batch& cpu_batch,
                                                 const Batch& gpu_batch, const std::string& what,
                                                 const std::vector<std::string>& skip) {
  absl::StatusOr<MultipleChoiceModel*> cpu = MultipleChoiceOf(*cpu_model_);
  absl::StatusOr<MultipleChoiceModel*> gpu = MultipleChoiceOf(*gpu_model_);
  if (!Check(cpu.status(), what + ": the CPU model") ||
      !Check(gpu.status(), what + ": the GPU model")) {
    return false;
  }
  auto mc = (*cpu)->MultipleChoice(On(sc, cpu_exec_), cpu_batch, Backward::kYes, scale_);
  auto mg = (*gpu)->MultipleChoice(On(sc, gpu_exec_), gpu_batch, Backward::kYes, scale_);
  if (!Check(mc.status(), what + ": the CPU step") ||
      !Check(mg.status(), what + ": the GPU step")) {
    return false;
  }
  ExpectLossClose(mg->loss, mc->loss, what);
  // 16-bit scores of close choices may rank differently; f32 ones may not.
  if (dtype_ == DType::kF32) {
    EXPECT_EQ(mg->predictions, mc->predictions) << what;
  }
  const TensorView& right =
      cpu_batch.choices.data != nullptr ? cpu_batch.choices : cpu_batch.labels;
  EXPECT_EQ(mg->predictions.size(), static_cast<size_t>(right.numel())) << what;
  ExpectGradsClose(gpu_store_, gpu_exec_, scale_, cpu_store_, scale_, GpuGradBound(dtype_), what,
                   skip);
  return true;
}

}  // namespace testing
}  // namespace models
}  // namespace mt
