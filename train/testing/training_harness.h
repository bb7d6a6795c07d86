// One training run for the training-level tests (GPT and BERT curves under TP and DP, loss
// scaling, the overlapped DP all-reduce, GPU against CPU, checkpoint resume): the parallel layout,
// the model from the registry, optimizer, schedule, scaler and the Trainer, driven over a
// BatchStream the test supplies, with everything a test compares recorded. A failure inside
// (a status that is not OK) is reported as a gtest failure and ends the run early with what was
// recorded so far; it never aborts the test binary. testonly.
#ifndef MT_TRAIN_TESTING_TRAINING_HARNESS_H_
#define MT_TRAIN_TESTING_TRAINING_HARNESS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/parallel_context.h"
#include "core/dtype.h"
#include "data/loader/loader.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace mt {
namespace train {
namespace testing {

// The trainer tests' model of `family`: 2 layers, hidden 32, 4 heads, a vocabulary of `vocab`
// padded to a multiple of 8, `positions` positions, dropout 0.1 (BERT: 2 token types).
models::ModelConfig TinyModel(models::Family family, int64_t vocab, int64_t positions);

struct HarnessConfig {
  models::ModelConfig model;
  int tp = 1;                        // The rest of the world is data-parallel.
  int cp = 1;                        // Context parallelism (model_options.context_parallel).
  int pp = 1;                        // Pipeline stages (the model built as this rank's stage).
  int layers_per_virtual_stage = 0;  // > 0: the interleaved schedule's model chunks.
  // PP > 1: a chunk instance per micro-batch in flight (as the drivers run); false: one instance,
  // recomputing forwards at the stage boundary.
  bool keep_activations = true;
  models::ModelOptions model_options;  // Its stage is set for this rank.
  int64_t micro_batch_size = 2;
  int64_t global_batch_size = 4;
  int64_t seq_length = 16;
  int start = 0;  // First iteration (> 0 with `load`).
  int end = 20;   // Trains iterations [start, end).
  DType compute_dtype = DType::kF32;
  bool gpu = false;  // On cuda:0 with a caching allocator, as the drivers run.
  uint64_t init_seed = 17;
  OptimizerConfig optimizer;
  LrScheduleConfig lr;  // decay_samples 0: through `end`.
  LossScalerConfig scaler;
  // A gradient element set to +inf after the backward passes of this iteration (0-based; -1:
  // never), on global rank inject_grad_overflow_rank (-1: every rank): fault_hooks.h's
  // GradOverflow.
  int64_t inject_grad_overflow_at = -1;
  int inject_grad_overflow_rank = -1;
  std::string load;  // Resume from this checkpoint directory (must hold `start`).
  std::string save;  // Save the state after `end` here.
};

struct HarnessResult {
  std::vector<double> losses;              // Per iteration: the total loss.
  std::vector<std::vector<double>> parts;  // Per iteration: the named parts.
  std::vector<double> grad_norms, lrs, scales;
  std::vector<int64_t> skipped_so_far;
  int64_t skipped = 0;
  double final_scale = 0;
  int64_t schedule_samples = 0;
  std::vector<float> first_values, last_values;  // f32 masters before and after.
  bool masters_sharded = false;  // The optimizer held them as DP shards (Optimizer).
  bool moments_sharded = false;  // The Adam moments were DP x CP shards (Optimizer).
  std::vector<double> first_compute, last_compute;  // Compute-dtype copies before and after.
  int64_t buckets = 0, buckets_in_backward = 0;     // Of the last iteration's DP reduction.
  comm::CommCounters dp_calls;                      // Of the DP group, over the training only.
  // Initial and final f32 masters by parameter name (this rank's shard).
  std::map<std::string, std::vector<float>> first_by_name, last_by_name;
  comm::CommCounters pp_counters;  // The pipeline communicator's calls over the run.
  PipelineTotals pipeline;         // The trainer's pipeline time (PP > 1).

  // Part k of every iteration.
  std::vector<double> Part(size_t k) const;
};

// This DP rank's micro-batches for the run (LoaderConfig filled with the layout, the batch sizes
// and start * global_batch_size consumed samples).
using MakeBatches =
    std::function<absl::StatusOr<std::unique_ptr<BatchStream>>(const data::LoaderConfig& loader)>;

// Collective over `world`.
HarnessResult RunTraining(comm::Communicator& world, const HarnessConfig& config,
                          const MakeBatches& make_batches);

// GPT micro-batches: contiguous samples of `seq_length` + 1 tokens from the indexed dataset at
// `prefix` (split "1", shuffled with `seed`), `num_samples` of them.
MakeBatches GptBatches(const std::string& prefix, int64_t seq_length, int64_t num_samples,
                       uint64_t seed);

// Writes the learnable synthetic GPT corpus (data/testing/synthetic_corpus.h: token ->
// (3 * token + 1) mod vocab) of `documents` documents of 10 to 59 tokens under $TEST_TMPDIR (or
// /tmp) as "<name>_rank<rank>" and returns its prefix; a failure is a test failure.
std::string WriteGptCorpus(const std::string& name, int rank, int vocab, int documents);

// max |staged - serial| / (abs_bound + rel_bound * moved) over the parameters of `staged` (this
// rank's, by name: HarnessResult::last_by_name of a TP/PP run), where `moved` is how far training
// moved the serial parameter (max |last - first| of serial_last/serial_first) and the serial
// values are sliced to this rank's TP shard: along dimension 0 (a block of rows) or along
// dimension 1 of a [size / hidden, hidden] view, both tried, the closer one counting; a
// vocabulary-padded shard is compared on the rows both hold. A parameter missing from the serial
// run is a test failure.
double WorstShardDifference(const std::map<std::string, std::vector<float>>& staged,
                            const std::map<std::string, std::vector<float>>& serial_first,
                            const std::map<std::string, std::vector<float>>& serial_last,
                            int tp_rank, int tp, int64_t hidden, double abs_bound,
                            double rel_bound);

// max |a_i - b_i| / |b_i|; infinite when the sizes differ.
double WorstRelative(const std::vector<double>& a, const std::vector<double>& b);

// This rank alone: a communicator of its own (the serial reference of a multi-rank test). A
// failed split is a test failure, and null.
std::unique_ptr<comm::Communicator> Alone(comm::Communicator& world);

// The three runs of the TP/DP curve tests: the same training serially on each rank alone, at
// TP=2 and at DP=2 over a 2-rank `world`; train(communicator, tp) runs one.
template <typename Result>
struct SerialTp2Dp2 {
  Result serial, tp2, dp2;
};

// Runs them; a failed split or a run without `iters` losses is a test failure (check
// HasFailure()).
template <typename Train>
auto TrainSerialTp2Dp2(comm::Communicator& world, size_t iters, const Train& train)
    -> SerialTp2Dp2<decltype(train(world, 1))> {
  SerialTp2Dp2<decltype(train(world, 1))> r;
  const std::unique_ptr<comm::Communicator> self = Alone(world);
  if (self == nullptr) return r;
  r.serial = train(*self, 1);
  r.tp2 = train(world, 2);
  r.dp2 = train(world, 1);
  EXPECT_EQ(r.serial.losses.size(), iters) << "serial";
  EXPECT_EQ(r.tp2.losses.size(), iters) << "TP=2";
  EXPECT_EQ(r.dp2.losses.size(), iters) << "DP=2";
  return r;
}

}  // namespace testing
}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_TESTING_TRAINING_HARNESS_H_
