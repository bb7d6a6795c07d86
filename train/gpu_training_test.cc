// Training on a GPU against training on the CPU (tagged "gpu"; skips without a device): 20 steps
// (8 on the CUDA emulator) of a small GPT-2 with dropout on, through the same Trainer and Optimizer
// (train/testing/training_harness.h), with the model, gradients, Adam moments and activations on
// cuda:0. The f32 GPU curve matches the f32 CPU curve to float rounding, and the bf16 GPU curve the
// bf16 CPU curve within bf16 tolerance (dropout masks are the same Philox draws on both). A
// checkpoint written from the GPU at iteration 10 and loaded into a fresh GPU model continues the
// curve (halfway on the emulator). The distributed optimizer on the GPU (two ranks sharing it
// through MPI) trains as the unsharded one.
//
// Runs as one MPI rank (a singleton: the Trainer needs a communicator for its layout); the
// TwoRanks test as two (gpu_training_test_np2).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_testutil.h"
#include "core/cuda_device.h"
#include "data/testing/synthetic_corpus.h"
#include "gtest/gtest.h"
#include "train/testing/training_harness.h"

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

// A learnable corpus (train/testing/synthetic_corpus.h): token -> (5 * token + 3) mod V; each
// rank of a multi-rank test writes its own (`suffix`).
std::string MakeCorpus(const std::string& suffix = "") {
  const std::string prefix = TmpDir() + "/gpu_training_corpus" + suffix;
  data::testing::SyntheticCorpusConfig c;
  c.documents = 200;
  c.vocab = kVocab;
  c.seed = 11;
  c.multiplier = 5;
  c.increment = 3;
  const absl::Status s = data::testing::WriteSyntheticCorpus(prefix, c);
  EXPECT_TRUE(s.ok()) << s;
  return prefix;
}

struct Curve {
  std::vector<double> losses, grad_norms;
  std::vector<float> last_values;
};

// Trains iterations [start, end) on the GPU or the CPU (loading `load` first and saving to `save`
// at the end when non-empty).
Curve Train(comm::Communicator& world, const std::string& corpus, bool gpu, DType dtype, int start,
            int end, const std::string& load = "", const std::string& save = "",
            const OptimizerConfig& oc = {}) {
  testing::HarnessConfig c;
  c.optimizer = oc;
  c.model.num_layers = 3;
  c.model.hidden_size = 64;
  c.model.num_attention_heads = 4;
  c.model.vocab_size = kVocab;
  c.model.make_vocab_size_divisible_by = 32;
  c.model.max_position_embeddings = kSeq;
  c.micro_batch_size = 4;
  c.global_batch_size = 8;
  c.seq_length = kSeq;
  c.start = start;
  c.end = end;
  c.compute_dtype = dtype;
  c.gpu = gpu;
  c.init_seed = 21;
  c.lr.max_lr = 2e-3;
  c.lr.min_lr = 2e-4;
  c.lr.warmup_samples = 3 * c.global_batch_size;
  c.lr.decay_samples = kIters * c.global_batch_size;
  c.load = load;
  c.save = save;
  const testing::HarnessResult r = testing::RunTraining(
      world, c, testing::GptBatches(corpus, kSeq, c.global_batch_size * kIters, /*seed=*/5));
  return {r.losses, r.grad_norms, r.last_values};
}

using testing::WorstRelative;

// GPU steps per curve: 20 on a GPU, 8 on the CUDA emulator (.bazelrc's cuda_emu sets
// MT_CUDA_EMU), whose kernels run on the CPU a hundred times slower than the CPU path: the same
// kernels, transfers and checkpoint round trip run, over fewer steps.
int GpuIters() { return std::getenv("MT_CUDA_EMU") != nullptr ? 8 : kIters; }

// The first n entries.
template <typename T>
std::vector<T> First(const std::vector<T>& v, int n) {
  return std::vector<T>(v.begin(), v.begin() + std::min<size_t>(n, v.size()));
}

// DP=2 on one GPU, bf16: the distributed optimizer's reduce-scatters, sharded AdamW and
// all-gathers of device tensors give the unsharded optimizer's training bit for bit (no
// clipping: see gpt_trainer_test.cc), and its GPU checkpoint resumes it bit for bit.
TEST_F(MpiTest, TwoRanksGpuDistributedOptimizer) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << cuda::Describe();
  if (comm_->size() != 2) GTEST_SKIP() << "run with 2 ranks";
  const std::string corpus = MakeCorpus(std::to_string(comm_->rank()));
  const std::string dir = TmpDir() + "/gpu_dist_ckpt";
  OptimizerConfig plain, dist;
  plain.clip_grad = dist.clip_grad = 0;
  plain.dp_bucket_elements = dist.dp_bucket_elements = 4001;
  dist.use_distributed_optimizer = true;
  const int iters = 4;
  const Curve a = Train(*comm_, corpus, true, DType::kBF16, 0, iters, "", "", plain);
  const Curve b = Train(*comm_, corpus, true, DType::kBF16, 0, iters, "", "", dist);
  ASSERT_EQ(b.losses.size(), static_cast<size_t>(iters));
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.last_values, b.last_values);
  Train(*comm_, corpus, true, DType::kBF16, 0, iters / 2, "", dir, dist);
  const Curve rest = Train(*comm_, corpus, true, DType::kBF16, iters / 2, iters, dir, "", dist);
  EXPECT_EQ(rest.losses, std::vector<double>(b.losses.begin() + iters / 2, b.losses.end()));
  EXPECT_EQ(rest.last_values, b.last_values);
}

TEST_F(MpiTest, GpuTrainingMatchesCpuTraining) {
  if (cuda::DeviceCount() < 1) GTEST_SKIP() << cuda::Describe();
  ASSERT_EQ(comm_->size(), 1) << "run as one rank";
  const std::string corpus = MakeCorpus();
  const int n = GpuIters();
  const Curve cpu32 = Train(*comm_, corpus, false, DType::kF32, 0, kIters);
  const Curve gpu32 = Train(*comm_, corpus, true, DType::kF32, 0, n);
  const Curve cpu16 = Train(*comm_, corpus, false, DType::kBF16, 0, n);
  const Curve gpu16 = Train(*comm_, corpus, true, DType::kBF16, 0, n);
  ASSERT_EQ(cpu32.losses.size(), static_cast<size_t>(kIters));
  ASSERT_EQ(gpu16.losses.size(), static_cast<size_t>(n));
  const double f32 = WorstRelative(gpu32.losses, First(cpu32.losses, n));
  const double bf16 = WorstRelative(gpu16.losses, cpu16.losses);
  const double bf16_vs_f32 = WorstRelative(gpu16.losses, First(cpu32.losses, n));
  std::printf(
      "%d-step GPT-2 curves: loss %.4f -> %.4f (CPU f32, %d steps); worst relative difference "
      "GPU vs CPU: f32 %.3g, bf16 %.3g; GPU bf16 vs CPU f32 %.3g\n",
      n, cpu32.losses.front(), cpu32.losses.back(), kIters, f32, bf16, bf16_vs_f32);
  EXPECT_LT(f32, 1e-4);
  EXPECT_LT(WorstRelative(gpu32.grad_norms, First(cpu32.grad_norms, n)), 1e-3);
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
  const int n = GpuIters();
  const Curve whole = Train(*comm_, corpus, true, DType::kBF16, 0, n);
  const Curve first = Train(*comm_, corpus, true, DType::kBF16, 0, n / 2, "", dir);
  const Curve rest = Train(*comm_, corpus, true, DType::kBF16, n / 2, n, dir);
  ASSERT_EQ(rest.losses.size(), static_cast<size_t>(n - n / 2));
  std::vector<double> resumed(first.losses);
  resumed.insert(resumed.end(), rest.losses.begin(), rest.losses.end());
  const double diff = WorstRelative(resumed, whole.losses);
  std::printf(
      "GPU bf16 run resumed at iteration %d: worst relative difference from the "
      "uninterrupted run %.3g (%s)\n",
      n / 2, diff, diff == 0 ? "bit-identical" : "not bit-identical");
  EXPECT_LT(diff, 1e-6);
}

}  // namespace
}  // namespace train
}  // namespace mt
