// Training on a GPU against training on the CPU (tagged "gpu"; skips without a device): 20 steps
// of a small GPT-2 with dropout on, through the same Trainer, GptTask and Optimizer, with the
// model, gradients, Adam moments and activations on cuda:0. The f32 GPU curve matches the f32
// CPU curve to float rounding, and the bf16 GPU curve the bf16 CPU curve within bf16 tolerance
// (dropout masks are the same Philox draws on both). A checkpoint written from the GPU at
// iteration 10 and loaded into a fresh GPU model continues the curve.
//
// Runs as one MPI rank (a singleton: the Trainer needs a communicator for its layout).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_testutil.h"
#include "comm/parallel_context.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/indexed/indexed_dataset.h"
#include "data/loader/loader.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "train/gpt_task.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/testing/synthetic_corpus.h"
#include "train/trainer.h"
#include "train/training_state.h"

namespace mt {
namespace train {
namespace {

using ::mt::comm::testing::MpiTest;

constexpr int kVocab = 96;
constexpr int kSeq = 32;
constexpr int kIters = 20;

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// A learnable corpus (train/testing/synthetic_corpus.h): token -> (5 * token + 3) mod V.
std::string MakeCorpus() {
  const std::string prefix = TmpDir() + "/gpu_training_corpus";
  testing::SyntheticCorpusConfig c;
  c.documents = 200;
  c.vocab = kVocab;
  c.seed = 11;
  c.multiplier = 5;
  c.increment = 3;
  const absl::Status s = testing::WriteSyntheticCorpus(prefix, c);
  EXPECT_TRUE(s.ok()) << s;
  return prefix;
}

struct Curve {
  std::vector<double> losses, grad_norms;
};

// Trains iterations [start, end) on `device` (loading `load` first and saving to `save` at the
// end when non-empty).
Curve Train(comm::Communicator& world, const std::string& corpus, bool gpu, DType dtype, int start,
          int end, const std::string& load = "", const std::string& save = "") {
  Curve out;
  models::ModelConfig mc;
  mc.num_layers = 3;
  mc.hidden_size = 64;
  mc.num_attention_heads = 4;
  mc.vocab_size = kVocab;
  mc.make_vocab_size_divisible_by = 32;
  mc.max_position_embeddings = kSeq;
  auto parallel = comm::ParallelContext::Create(world, comm::ParallelConfig{}, 4);
  EXPECT_TRUE(parallel.ok()) << parallel.status();
  if (!parallel.ok()) return out;
  ExecContext ec;
  std::unique_ptr<cuda::DeviceContext> dc;
  std::unique_ptr<cuda::CachingAllocator> pool;  // As the drivers run.
  if (gpu) {
    auto c = cuda::DeviceContext::Create(0);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return out;
    dc = std::move(*c);
    ec.device = Device::Cuda(0);
    ec.cuda = dc.get();
    pool = std::make_unique<cuda::CachingAllocator>(cuda::CachingAllocator::CudaBackend(0));
    ec.memory_pool = pool.get();
  }
  const int64_t micro = 4, global = 8;
  auto indexed = data::IndexedDataset::Open(corpus);
  EXPECT_TRUE(indexed.ok()) << indexed.status();
  data::GptDatasetConfig dsc;
  dsc.split = "1";
  dsc.seq_len = kSeq;
  dsc.num_samples = global * kIters;
  dsc.seed = 5;
  auto ds = data::GptDataset::Create(
      std::shared_ptr<const data::IndexedDataset>(std::move(*indexed)), data::Split::kTrain, dsc);
  EXPECT_TRUE(ds.ok()) << ds.status();
  data::LoaderConfig lc;
  lc.micro_batch_size = micro;
  lc.global_batch_size = global;
  lc.consumed_samples = start * global;
  auto loader = data::Loader::Create(
      data::GptSampleSource(std::shared_ptr<const data::GptDataset>(std::move(*ds))), lc);
  EXPECT_TRUE(loader.ok()) << loader.status();

  nn::ParameterStore store(0, 1, dtype, ec.device);
  auto model = models::GptModel::Create(mc, &store);
  EXPECT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(store.Allocate(21).ok());
  auto opt = Optimizer::Create(&store, OptimizerConfig{});
  EXPECT_TRUE(opt.ok()) << opt.status();
  LrScheduleConfig sc;
  sc.max_lr = 2e-3;
  sc.min_lr = 2e-4;
  sc.warmup_samples = 3 * global;
  sc.decay_samples = kIters * global;
  LrSchedule schedule(sc);
  LossScaler scaler(LossScalerConfig{});
  TrainingCounters counters;
  if (!load.empty()) {
    absl::Status s = LoadTrainingState(load, **parallel, mc, &store, &*opt, &scaler, &schedule,
                                       &counters);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(counters.iteration, start);
  }
  TrainerConfig tc;
  tc.micro_batch_size = micro;
  tc.global_batch_size = global;
  tc.seq_length = kSeq;
  tc.train_iters = end;
  tc.quiet = true;
  GptTask task(model->get(), false, loader->get(), nullptr);
  Trainer trainer(tc, parallel->get(), &ec, &task, &store, &*opt, &schedule, &scaler);
  trainer.set_consumed_samples(start * global);
  absl::Status st = trainer.Train(start, nullptr, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  for (const LogRecord& r : trainer.history()) {
    out.losses.push_back(r.loss.total);
    out.grad_norms.push_back(r.grad_norm);
  }
  if (!save.empty()) {
    counters.iteration = end;
    counters.consumed_samples = trainer.consumed_samples();
    absl::Status s =
        SaveTrainingState(save, 2, **parallel, mc, store, *opt, scaler, schedule, counters);
    EXPECT_TRUE(s.ok()) << s;
  }
  return out;
}

double WorstRelative(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  }
  return a.size() == b.size() ? worst : INFINITY;
}

TEST_F(MpiTest, GpuTrainingMatchesCpuTraining) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << cuda::Describe();
  ASSERT_EQ(comm_->size(), 1) << "run as one rank";
  const std::string corpus = MakeCorpus();
  const Curve cpu32 = Train(*comm_, corpus, false, DType::kF32, 0, kIters);
  const Curve gpu32 = Train(*comm_, corpus, true, DType::kF32, 0, kIters);
  const Curve cpu16 = Train(*comm_, corpus, false, DType::kBF16, 0, kIters);
  const Curve gpu16 = Train(*comm_, corpus, true, DType::kBF16, 0, kIters);
  ASSERT_EQ(cpu32.losses.size(), static_cast<size_t>(kIters));
  const double f32 = WorstRelative(gpu32.losses, cpu32.losses);
  const double bf16 = WorstRelative(gpu16.losses, cpu16.losses);
  const double bf16_vs_f32 = WorstRelative(gpu16.losses, cpu32.losses);
  std::printf("20-step GPT-2 curves: loss %.4f -> %.4f (CPU f32); worst relative difference GPU "
              "vs CPU: f32 %.3g, bf16 %.3g; GPU bf16 vs CPU f32 %.3g\n",
              cpu32.losses.front(), cpu32.losses.back(), f32, bf16, bf16_vs_f32);
  EXPECT_LT(f32, 1e-4);
  EXPECT_LT(WorstRelative(gpu32.grad_norms, cpu32.grad_norms), 1e-3);
  // bf16 has 8 significant bits (u = 2^-8): the CPU and GPU round different partial sums, and the
  // difference compounds over 20 steps; 2% is about 5 u.
  EXPECT_LT(bf16, 2e-2);
  EXPECT_LT(bf16_vs_f32, 5e-2);
  EXPECT_LT(cpu32.losses.back(), cpu32.losses.front() - 0.5);  // It learns.
}

TEST_F(MpiTest, GpuCheckpointResumeContinuesTheCurve) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << cuda::Describe();
  const std::string corpus = MakeCorpus();
  const std::string dir = TmpDir() + "/gpu_ckpt";
  const Curve whole = Train(*comm_, corpus, true, DType::kBF16, 0, kIters);
  const Curve first = Train(*comm_, corpus, true, DType::kBF16, 0, 10, "", dir);
  const Curve rest = Train(*comm_, corpus, true, DType::kBF16, 10, kIters, dir);
  ASSERT_EQ(rest.losses.size(), static_cast<size_t>(kIters - 10));
  std::vector<double> resumed(first.losses);
  resumed.insert(resumed.end(), rest.losses.begin(), rest.losses.end());
  const double diff = WorstRelative(resumed, whole.losses);
  std::printf("GPU bf16 run resumed at iteration 10: worst relative difference from the "
              "uninterrupted run %.3g (%s)\n",
              diff, diff == 0 ? "bit-identical" : "not bit-identical");
  EXPECT_LT(diff, 1e-6);
}

}  // namespace
}  // namespace train
}  // namespace mt
