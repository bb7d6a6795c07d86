// Training-level golden tests of train::Trainer with BERT (run under mpirun with 2 ranks): TP=2
// and DP=2 training curves (MLM and SOP losses, gradient norms) equal the serial curve over 16
// steps within float32 rounding with dropout on, and the model learns; the BERT loader slices each
// global batch over the DP ranks like the GPT loader and resumes from a consumed-samples count,
// and the trainer's dropout sample offsets are the first samples it hands each rank.
// The distributed optimizer's curve and weights equal the serial ones within float32 rounding, and
// so do pipeline-parallel runs (PP=2, 1F1B and interleaved), 20 steps each; with 4 ranks
// (bert_trainer_test_np4) PP=2 x DP=2 and PP=2 x TP=2 too. Context parallelism (CP=2; with 4
// ranks CP=2 x TP=2 with and without sequence parallelism, and CP=4) follows the serial curves,
// and a CP=2 checkpoint resumes at CP=1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "comm/mpi_testutil.h"
#include "comm/parallel_context.h"
#include "core/exec_context.h"
#include "core/status.h"
#include "core/status_testutil.h"
#include "data/bert_dataset/bert_dataset.h"
#include "data/bert_dataset/bert_vocab.h"
#include "data/indexed/indexed_dataset.h"
#include "gtest/gtest.h"
#include "train/batches.h"
#include "train/testing/training_harness.h"

namespace mt {
namespace train {
namespace {

using ::mt::comm::testing::MpiTest;

constexpr int kVocab = 64;
constexpr int kSeq = 32;
constexpr int kFirstWord = 5;  // 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], then words.
constexpr int kWords = 16;

data::BertVocab TestVocab() {
  std::vector<std::string> t = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int i = kFirstWord; i < kVocab; ++i) t.push_back(absl::StrCat("w", i));
  auto v = data::BertVocab::FromTokens(t);
  EXPECT_TRUE(v.ok()) << v.status();
  return *v;
}

// A learnable sentence corpus over the first kWords words of the vocabulary (the others never
// occur): within a document, word w is followed by (3 * w + 1) mod kWords, with some noise;
// documents of 3-6 sentences of 4-12 words.
std::string MakeCorpus(int rank) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string prefix =
      std::string(tmp ? tmp : "/tmp") + "/bert_corpus_rank" + std::to_string(rank);
  auto w = data::IndexedDatasetWriter::CreateForVocab(prefix, kVocab);
  EXPECT_TRUE(w.ok()) << w.status();
  const int words = kWords;
  std::mt19937_64 rng(7);
  for (int d = 0; d < 80; ++d) {
    int t = static_cast<int>(rng() % words);
    const int sentences = 3 + static_cast<int>(rng() % 4);
    for (int s = 0; s < sentences; ++s) {
      std::vector<int32_t> sentence;
      const int len = 4 + static_cast<int>(rng() % 9);
      for (int i = 0; i < len; ++i) {
        sentence.push_back(kFirstWord + t);
        t = (rng() % 10 == 0) ? static_cast<int>(rng() % words) : (3 * t + 1) % words;
      }
      EXPECT_TRUE((*w)->AddSequence(sentence).ok());
    }
    EXPECT_TRUE((*w)->EndDocument().ok());
  }
  EXPECT_TRUE((*w)->Finalize().ok());
  return prefix;
}

std::shared_ptr<const data::BertDataset> MakeDataset(const std::string& prefix,
                                                     int64_t num_samples) {
  auto data = data::IndexedDataset::Open(prefix);
  EXPECT_TRUE(data.ok()) << data.status();
  data::BertDatasetConfig dc;
  dc.split = "1";
  dc.seq_len = kSeq;
  dc.num_samples = num_samples;
  dc.seed = 3;
  auto ds = data::BertDataset::Create(std::shared_ptr<const data::IndexedDataset>(std::move(*data)),
                                      data::Split::kTrain, dc, TestVocab());
  EXPECT_TRUE(ds.ok()) << ds.status();
  return std::shared_ptr<const data::BertDataset>(std::move(*ds));
}

models::ModelConfig TinyBert() { return testing::TinyModel(models::Family::kBert, kVocab, kSeq); }

struct Result {
  std::vector<double> losses, lm, sop, grad_norms;
  std::vector<float> last_values;
  std::map<std::string, std::vector<float>> first_by_name, last_by_name;
};

struct Layout {
  int pp = 1;
  int layers_per_virtual_stage = 0;
  int num_layers = 2;
  int cp = 1;  // Context parallelism.
  bool sequence_parallel = false;
  int start = 0, end = -1;  // Iterations [start, end) of the schedule's `iters` (-1: all).
  std::string load, save;   // Checkpoint directories.
};

Result Train(comm::Communicator& world, int tp, int64_t micro, int64_t global, int iters,
             const std::string& prefix, const OptimizerConfig& oc = {}, const Layout& lay = {}) {
  testing::HarnessConfig c;
  c.optimizer = oc;
  c.model = TinyBert();
  c.model.num_layers = lay.num_layers;
  c.pp = lay.pp;
  c.cp = lay.cp;
  c.model_options.sequence_parallel = lay.sequence_parallel;
  c.start = lay.start;
  c.load = lay.load;
  c.save = lay.save;
  c.layers_per_virtual_stage = lay.layers_per_virtual_stage;
  c.tp = tp;
  c.micro_batch_size = micro;
  c.global_batch_size = global;
  c.seq_length = kSeq;
  c.end = lay.end < 0 ? iters : lay.end;
  c.lr.max_lr = 1e-2;
  c.lr.min_lr = 1e-3;
  c.lr.warmup_samples = global * 2;
  c.lr.decay_samples = global * iters;
  const testing::HarnessResult r = testing::RunTraining(
      world, c, [&](const data::LoaderConfig& lc) -> absl::StatusOr<std::unique_ptr<BatchStream>> {
        ASSIGN_OR_RETURN(auto loader,
                         data::BertLoader::Create(MakeDataset(prefix, global * iters), lc));
        return BertBatches(std::move(loader));
      });
  return {r.losses,      r.Part(0),       r.Part(1),     r.grad_norms,
          r.last_values, r.first_by_name, r.last_by_name};
}

TEST_F(MpiTest, BertTensorAndDataParallelCurvesMatchSerial) {
  if (comm_->size() != 2) GTEST_SKIP() << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const int iters = 16;
  // Global batch 8 as 2 micro-batches of 4.
  const auto [serial, tp2, dp2] = testing::TrainSerialTp2Dp2(
      *comm_, iters,
      [&](comm::Communicator& world, int tp) { return Train(world, tp, 4, 8, iters, prefix); });
  if (HasFailure()) return;
  const double worst_tp = std::max(testing::WorstRelative(tp2.lm, serial.lm),
                                   testing::WorstRelative(tp2.sop, serial.sop));
  const double worst_dp = std::max(testing::WorstRelative(dp2.lm, serial.lm),
                                   testing::WorstRelative(dp2.sop, serial.sop));
  for (int i = 0; i < iters; ++i) {
    EXPECT_NEAR(tp2.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
    EXPECT_NEAR(dp2.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
    EXPECT_NEAR(serial.losses[i], serial.lm[i] + serial.sop[i], 1e-12 * serial.losses[i]) << i;
  }
  if (comm_->rank() == 0) {
    std::printf(
        "BERT %d-step curves: worst relative lm/sop loss difference TP=2 %.3g, DP=2 %.3g; "
        "lm loss %.4f -> %.4f, sop loss %.4f -> %.4f\n",
        iters, worst_tp, worst_dp, serial.lm.front(), serial.lm.back(), serial.sop.front(),
        serial.sop.back());
  }
  EXPECT_LT(worst_tp, 1e-5);
  EXPECT_LT(worst_dp, 1e-5);
  EXPECT_LT(serial.lm.back(), serial.lm.front() - 0.5);  // It learns.
}

TEST_F(MpiTest, BertLoaderSlicesGlobalBatchesLikeTheGptLoaderAndResumes) {
  const std::string prefix = MakeCorpus(comm_->rank());
  auto ds = MakeDataset(prefix, 48);
  const int64_t n = ds->num_samples();
  for (int dp_rank = 0; dp_rank < 2; ++dp_rank) {
    data::LoaderConfig lc;
    lc.micro_batch_size = 3;
    lc.global_batch_size = 12;
    lc.data_parallel_size = 2;
    lc.data_parallel_rank = dp_rank;
    auto loader = data::BertLoader::Create(ds, lc);
    ASSERT_TRUE(loader.ok()) << loader.status();
    EXPECT_EQ((*loader)->accumulation_steps(), 2);
    int64_t step = 0;
    std::vector<std::vector<int64_t>> seen;
    while (auto mb = (*loader)->Next()) {
      ASSERT_EQ(mb->sample_indices.size(), 3u);
      for (int b = 0; b < 3; ++b) {
        EXPECT_EQ(mb->sample_indices[b], step * 6 + dp_rank * 3 + b);
        const data::BertSample s = ds->Sample(mb->sample_indices[b]);
        for (int t = 0; t < kSeq; ++t) {
          ASSERT_EQ(mb->tokens.data_as<int32_t>()[b * kSeq + t], s.tokens[t]);
          ASSERT_EQ(mb->token_types.data_as<int32_t>()[b * kSeq + t], s.token_types[t]);
          ASSERT_EQ(mb->padding_mask.data_as<int32_t>()[b * kSeq + t], s.padding_mask[t]);
          ASSERT_EQ(mb->mlm_labels.data_as<int32_t>()[b * kSeq + t], s.labels[t]);
        }
        EXPECT_EQ(mb->sop_labels.data_as<int32_t>()[b], s.sop_label);
      }
      EXPECT_EQ(mb->iteration, step / 2);
      EXPECT_EQ(mb->micro_step, step % 2);
      EXPECT_EQ(mb->consumed_samples, (step + 1) * 6);
      seen.push_back(mb->sample_indices);
      ++step;
    }
    EXPECT_EQ(step, n / 12 * 2);  // Only complete global batches.
    // Resuming after two global batches yields the rest.
    lc.consumed_samples = 24;
    auto resumed = data::BertLoader::Create(ds, lc);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    for (size_t i = 4; i < seen.size(); ++i) {
      auto mb = (*resumed)->Next();
      ASSERT_TRUE(mb.has_value());
      EXPECT_EQ(mb->sample_indices, seen[i]);
    }
    EXPECT_FALSE((*resumed)->Next().has_value());
  }
  data::LoaderConfig bad;
  bad.micro_batch_size = 3;
  bad.global_batch_size = 12;
  bad.consumed_samples = n + 12;
  EXPECT_EQ(data::BertLoader::Create(ds, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// The dropout keys follow the data: at DP = 2 the step context TrainingMicroStep gives each rank's
// micro-batch has sample_offset = the first sample the loader hands that rank (the sampler's
// layout, checked above), micro_step = the iteration and the run's seed, from the start and after a
// resume.
TEST_F(MpiTest, MicroStepSampleOffsetIsTheLoadersFirstSample) {
  ASSERT_OK_AND_ASSIGN(auto parallel, comm::ParallelContext::Create(*comm_, {}, 4));
  ASSERT_EQ(parallel->dp_size(), 2);
  auto ds = MakeDataset(MakeCorpus(comm_->rank()), 48);
  const ExecContext ec;
  for (int64_t resume_at : {0, 24}) {
    data::LoaderConfig lc;
    lc.micro_batch_size = 3;
    lc.global_batch_size = 12;
    lc.data_parallel_size = 2;
    lc.data_parallel_rank = parallel->dp_rank();
    lc.consumed_samples = resume_at;
    ASSERT_OK_AND_ASSIGN(auto loader, data::BertLoader::Create(ds, lc));
    int micro_batches = 0;
    while (auto mb = loader->Next()) {
      const int64_t iteration_start = mb->iteration * lc.global_batch_size;
      const nn::StepContext sc = TrainingMicroStep(
          &ec, *parallel, 77, mb->iteration, iteration_start, lc.micro_batch_size, mb->micro_step);
      EXPECT_EQ(sc.sample_offset, mb->sample_indices[0]) << "iteration " << mb->iteration;
      EXPECT_EQ(sc.micro_step, static_cast<uint64_t>(mb->iteration));
      EXPECT_EQ(sc.dropout_seed, 77u);
      EXPECT_EQ(sc.tp, nullptr);
      EXPECT_EQ(sc.exec, &ec);
      ++micro_batches;
    }
    EXPECT_EQ(micro_batches, (ds->num_samples() - resume_at) / lc.global_batch_size * 2);
  }
}

// The distributed optimizer (Adam moments sharded over DP=2) trains BERT as the serial run.
TEST_F(MpiTest, BertDistributedOptimizerMatchesSerial) {
  if (comm_->size() != 2) GTEST_SKIP() << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 20;
  OptimizerConfig oc;
  oc.use_distributed_optimizer = true;
  oc.dp_bucket_elements = 1001;  // Buckets across parameters.
  Result serial = Train(*self, 1, 4, 8, iters, prefix);
  Result dist = Train(*comm_, 1, 4, 8, iters, prefix, oc);
  ASSERT_EQ(dist.losses.size(), static_cast<size_t>(iters));
  ASSERT_EQ(dist.last_values.size(), serial.last_values.size());
  const double worst = std::max(testing::WorstRelative(dist.lm, serial.lm),
                                testing::WorstRelative(dist.sop, serial.sop));
  double weights = 0;
  for (size_t i = 0; i < serial.last_values.size(); ++i) {
    weights = std::max(weights, std::fabs(double{dist.last_values[i]} - serial.last_values[i]));
  }
  for (int i = 0; i < iters; ++i) {
    EXPECT_NEAR(dist.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
  }
  if (comm_->rank() == 0) {
    std::printf(
        "BERT distributed optimizer DP=2: %d-step worst relative lm/sop loss difference to "
        "serial %.3g, worst weight difference %.3g\n",
        iters, worst, weights);
  }
  // The bounds of the DP=2 curve test above, and for the weights those of the GPT test
  // (gpt_trainer_test.cc: a relative gradient error up to 1e-3 from cancelling micro-batch
  // terms, here over 20 steps at lr <= 1e-2).
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(weights, iters * 1e-2 * 1e-3);
  EXPECT_LT(dist.lm.back(), dist.lm.front() - 0.5);
}

// Context parallelism: each sequence in 2 CP chunks per rank (ring attention, bidirectional with
// the padding mask split with the sequence; the sentence-order head on CP rank 0, which holds the
// [CLS] positions), dropout on: CP=2 follows the serial MLM and SOP curves, and its checkpoint
// resumes at CP=1 on the serial curve.
TEST_F(MpiTest, BertContextParallelMatchesSerialAndResumesAtCp1) {
  if (comm_->size() != 2) GTEST_SKIP() << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 20, half = 10;
  const Result serial = Train(*self, 1, 4, 8, iters, prefix);
  Layout cp2;
  cp2.cp = 2;
  const Result r = Train(*comm_, 1, 4, 8, iters, prefix, {}, cp2);
  ASSERT_EQ(r.losses.size(), static_cast<size_t>(iters));
  const double worst =
      std::max(testing::WorstRelative(r.lm, serial.lm), testing::WorstRelative(r.sop, serial.sop));
  for (int i = 0; i < iters; ++i) {
    EXPECT_NEAR(r.grad_norms[i], serial.grad_norms[i], 1e-4 * serial.grad_norms[i]) << i;
  }
  EXPECT_LT(worst, 1e-5);
  const char* tmp = std::getenv("TEST_TMPDIR");
  cp2.save = std::string(tmp ? tmp : "/tmp") + "/bert_cp2_ckpt";
  cp2.end = half;
  Train(*comm_, 1, 4, 8, iters, prefix, {}, cp2);
  Layout resume;
  resume.load = cp2.save;
  resume.start = half;
  const Result resumed = Train(*self, 1, 4, 8, iters, prefix, {}, resume);
  const std::vector<double> lm(serial.lm.begin() + half, serial.lm.end());
  const std::vector<double> sop(serial.sop.begin() + half, serial.sop.end());
  ASSERT_EQ(resumed.lm.size(), lm.size());
  const double worst_resumed =
      std::max(testing::WorstRelative(resumed.lm, lm), testing::WorstRelative(resumed.sop, sop));
  EXPECT_LT(worst_resumed, 1e-5);
  if (comm_->rank() == 0) {
    std::printf(
        "BERT CP=2: %d-step worst relative lm/sop loss difference to serial %.3g; resumed at "
        "CP=1 from its iteration-%d checkpoint %.3g\n",
        iters, worst, half, worst_resumed);
  }
}

// Pipeline parallelism (two stages of a 4-layer BERT, 1F1B and interleaved with 2 model chunks of
// one layer per stage) trains as the serial run for 20 steps: each stage's parameters (the word
// embedding on both the first and the last) end equal to the serial model's, the MLM and SOP curves
// and the gradient norms within float32 rounding.
TEST_F(MpiTest, BertPipelineMatchesSerial) {
  if (comm_->size() != 2) GTEST_SKIP() << "run with 2 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 20;
  Layout serial_layout;
  serial_layout.num_layers = 4;
  const Result serial = Train(*self, 1, 2, 8, iters, prefix, {}, serial_layout);
  for (int per_chunk : {0, 1}) {
    Layout lay = serial_layout;
    lay.pp = 2;
    lay.layers_per_virtual_stage = per_chunk;
    const Result pp = Train(*comm_, 1, 2, 8, iters, prefix, {}, lay);
    const std::string what = per_chunk == 0 ? "PP=2" : "PP=2 interleaved";
    ASSERT_EQ(pp.losses.size(), static_cast<size_t>(iters)) << what;
    const double worst = std::max(testing::WorstRelative(pp.lm, serial.lm),
                                  testing::WorstRelative(pp.sop, serial.sop));
    const double norms = testing::WorstRelative(pp.grad_norms, serial.grad_norms);
    double weights = 0;
    size_t held = 0;
    for (const auto& [name, mine] : pp.last_by_name) {
      const auto it = serial.last_by_name.find(name);
      ASSERT_NE(it, serial.last_by_name.end()) << what << ": " << name;
      ASSERT_EQ(mine.size(), it->second.size()) << what << ": " << name;
      for (size_t k = 0; k < mine.size(); ++k) {
        weights = std::max(weights, std::fabs(double{mine[k]} - it->second[k]));
      }
      ++held;
    }
    // Each stage holds part of the model: the first the embeddings and two layers, the last
    // two layers, the heads and the tied word embedding.
    EXPECT_GT(held, 0u) << what;
    EXPECT_LT(held, serial.last_by_name.size()) << what;
    if (comm_->rank() == 0) {
      std::printf(
          "BERT %s: %d-step worst relative lm/sop loss difference to serial %.3g, grad norm "
          "%.3g, worst weight difference %.3g\n",
          what.c_str(), iters, worst, norms, weights);
    }
    // The bounds of the DP=2 test above (the pipeline reassociates the tied embedding's gradient
    // and carries the squared norm in f32 across the stages, pipeline_trainer_test.cc).
    EXPECT_LT(worst, 1e-5) << what;
    EXPECT_LT(norms, 1e-4) << what;
    EXPECT_LT(weights, iters * 1e-2 * 1e-3) << what;
  }
  EXPECT_LT(serial.lm.back(), serial.lm.front() - 0.5);  // It learns.
}

// Pipeline stages with data and tensor parallelism (4 ranks: bert_trainer_test_np4): PP=2 x DP=2
// and PP=2 x TP=2 train a 4-layer BERT as the serial run for 20 steps, the MLM and SOP curves and
// the gradient norms within float32 rounding, and every rank's parameters (its TP shard of its
// stage's) within the bounds above of the serial model's.
TEST_F(MpiTest, FourRanksBertPipelineWithTensorAndDataParallelMatchesSerial) {
  if (comm_->size() != 4) GTEST_SKIP() << "run with 4 ranks";
  const int me = comm_->rank();
  const std::string prefix = MakeCorpus(me);
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 20;
  Layout lay;
  lay.num_layers = 4;
  const Result serial = Train(*self, 1, 2, 8, iters, prefix, {}, lay);
  lay.pp = 2;
  for (int tp : {1, 2}) {  // The other ranks of the stage are DP ranks at TP = 1.
    const Result r = Train(*comm_, tp, 2, 8, iters, prefix, {}, lay);
    const std::string what = tp == 1 ? "PP=2 x DP=2" : "PP=2 x TP=2";
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(iters)) << what;
    const double worst = std::max(testing::WorstRelative(r.lm, serial.lm),
                                  testing::WorstRelative(r.sop, serial.sop));
    const double norms = testing::WorstRelative(r.grad_norms, serial.grad_norms);
    const double weights =
        testing::WorstShardDifference(r.last_by_name, serial.first_by_name, serial.last_by_name,
                                      me % tp, tp, TinyBert().hidden_size, iters * 1e-2 * 1e-3, 0);
    if (me == 0) {
      std::printf(
          "BERT %s: %d-step worst relative lm/sop loss difference to serial %.3g, grad norm "
          "%.3g, worst weight difference / bound %.3g\n",
          what.c_str(), iters, worst, norms, weights);
    }
    EXPECT_LT(worst, 1e-5) << what;
    EXPECT_LT(norms, 1e-4) << what;
    EXPECT_LT(weights, 1.0) << what;
  }
}

// CP=2 x TP=2, with and without sequence parallelism, and CP=4 (4 ranks: bert_trainer_test_np4)
// follow the serial MLM and SOP curves.
TEST_F(MpiTest, FourRanksBertContextParallelMatchesSerial) {
  if (comm_->size() != 4) GTEST_SKIP() << "run with 4 ranks";
  const std::string prefix = MakeCorpus(comm_->rank());
  const std::unique_ptr<comm::Communicator> self = testing::Alone(*comm_);
  ASSERT_NE(self, nullptr);
  const int iters = 20;
  const Result serial = Train(*self, 1, 4, 8, iters, prefix);
  for (int run = 0; run < 3; ++run) {
    Layout lay;
    lay.cp = run == 2 ? 4 : 2;
    lay.sequence_parallel = run == 1;
    const int tp = run == 2 ? 1 : 2;
    const Result r = Train(*comm_, tp, 4, 8, iters, prefix, {}, lay);
    const std::string what = run == 0 ? "CP=2 x TP=2" : run == 1 ? "CP=2 x TP=2 with SP" : "CP=4";
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(iters)) << what;
    const double worst = std::max(testing::WorstRelative(r.lm, serial.lm),
                                  testing::WorstRelative(r.sop, serial.sop));
    const double norms = testing::WorstRelative(r.grad_norms, serial.grad_norms);
    if (comm_->rank() == 0) {
      std::printf(
          "BERT %s: %d-step worst relative lm/sop loss difference to serial %.3g, grad "
          "norm %.3g\n",
          what.c_str(), iters, worst, norms);
    }
    EXPECT_LT(worst, 1e-5) << what;
    EXPECT_LT(norms, 1e-4) << what;
  }
}

}  // namespace
}  // namespace train
}  // namespace mt
