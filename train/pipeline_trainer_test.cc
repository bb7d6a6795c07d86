// Training-level tests of pipeline parallelism with GPT-2 (run under mpirun with 4 ranks,
// oversubscribed on small machines): 20-step loss curves, gradient norms and final weights at
// PP=2, PP=2 x TP=2 (with and without sequence parallelism), PP=2 x DP=2 (with and without the
// distributed optimizer) and the
// interleaved schedule (PP=2, 2 virtual stages) equal the serial run's within float32 rounding
// (dropout on), and so do TP=2, PP=2 and PP=2 x TP=2 with an untied output layer; the sends and
// receives per micro-batch per stage boundary are exactly the schedule's; the measured bubble is
// printed next to the theory.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/mpi_testutil.h"
#include "comm/pipeline_order.h"
#include "core/status.h"
#include "data/testing/synthetic_corpus.h"
#include "gtest/gtest.h"
#include "train/testing/training_harness.h"

namespace mt {
namespace train {
namespace {

using ::mt::comm::testing::MpiTest;
using Result = testing::HarnessResult;

constexpr int kVocab = 50;
constexpr int kSeq = 16;
constexpr int kIters = 20;
constexpr int64_t kGlobal = 8, kMicro = 2;

std::string MakeCorpus(int rank) { return testing::WriteGptCorpus("pp_corpus", rank, kVocab, 80); }

// What the 4-rank tests train on and over: the rank's corpus, the rank alone (the serial
// reference) and its pair of ranks {0, 1} or {2, 3} (one pipeline of two stages).
struct FourRanks {
  std::string data;
  std::unique_ptr<comm::Communicator> self, pair;
};
absl::StatusOr<FourRanks> SplitFourRanks(comm::Communicator& world) {
  const int me = world.rank();
  FourRanks r{MakeCorpus(me)};
  ASSIGN_OR_RETURN(r.self, world.Split(me, 0, "self"));
  ASSIGN_OR_RETURN(r.pair, world.Split(me / 2, me, "pair"));
  return r;
}

testing::HarnessConfig Config(int tp, int pp, int layers_per_virtual_stage = 0) {
  testing::HarnessConfig c;
  c.model = testing::TinyModel(models::Family::kGpt2, kVocab, kSeq);
  c.model.num_layers = 4;
  c.tp = tp;
  c.pp = pp;
  c.layers_per_virtual_stage = layers_per_virtual_stage;
  c.micro_batch_size = kMicro;
  c.global_batch_size = kGlobal;
  c.seq_length = kSeq;
  c.end = kIters;
  c.lr.max_lr = 3e-3;
  c.lr.min_lr = 3e-4;
  c.lr.warmup_samples = kGlobal * 3;
  c.lr.decay_samples = kGlobal * kIters;
  return c;
}

Result Train(comm::Communicator& world, const testing::HarnessConfig& c, const std::string& data) {
  return testing::RunTraining(world, c, testing::GptBatches(data, kSeq, kGlobal * kIters, 3));
}

// Tolerances. The stages run the same operations as the serial model on the same values (the
// stage test shows one forward/backward bit-identical), except that (1) the tied word embedding's
// gradient is summed per stage over the micro-batches and then across the two stages, instead of
// interleaved, (2) the squared gradient norm crosses the pipeline as f32 (the serial run keeps it
// in f64), and (3) TP and DP reduce as in their own tests. Each is a reassociation or rounding of
// relative size a few u32 (u32 = 6e-8) in some gradient elements each step; AdamW's update
// lr * m / sqrt(v) changes by at most twice that relative amount, and 20 steps compound to about
// 20 * 2 * k * u32 relative in the losses; the TP/DP curve tests bound the same effects by 1e-5
// (k ~ 4, margin 10x), which we keep. The weights move by at most lr_max = 3e-3 per step; a
// relative change of 1e-5 of each of 20 updates moves a weight by at most 20 * 3e-3 * 1e-5 = 6e-7.
// One exception: the attention's key bias has a gradient that vanishes identically (the softmax
// is invariant to adding q.b_k to every score), so what it receives is rounding noise, which
// AdamW normalises into steps of up to lr; the reassociations above change that noise, hence
// its steps. For it (and generally) we allow a further 1e-3 of how far training moved the tensor.
constexpr double kLossRel = 1e-5;
constexpr double kWeightAbs = 6e-7;
constexpr double kWeightRel = 1e-3;

// Kept activations: no forward runs twice. Recomputing (one instance per chunk): 1F1B over
// m = 4 on stage 0 of 2 is F0 F1 B0 F2 B1 F3 B2 B3, and each backward finds the instance
// holding a later forward or none, so all 4 recompute; the last stage never does.
// Interleaved (comm/pipeline_order_test's orders): on stage 0 every backward of both chunks
// (8); on stage 1 those of chunk 0 (4), while chunk 1 runs each backward right after its
// forward.
void ExpectRecomputedForwards(const Result& r, const testing::HarnessConfig& c, int me,
                              const char* name) {
  if (c.keep_activations) {
    EXPECT_EQ(r.pipeline.recomputed, 0) << name << " rank " << me;
    return;
  }
  const int64_t per_iteration =
      c.layers_per_virtual_stage > 0 ? (me % 2 == 0 ? 8 : 4) : (me % 2 == 0 ? 4 : 0);
  EXPECT_EQ(r.pipeline.recomputed, kIters * per_iteration) << name << " rank " << me;
}

// With DP buckets of 1000 elements the DP reduction overlaps the schedule: buckets start during
// the last micro-batch's backward (with the distributed optimizer, not those of the tied
// embedding, which wait for its sum over the two stages).
void ExpectOverlappedBuckets(const Result& r, const testing::HarnessConfig& c, int me,
                             const char* name) {
  if (c.optimizer.dp_bucket_elements != 1000) return;
  if (me == 0) {
    std::printf("%s: %lld of %lld buckets started during backward\n", name,
                static_cast<long long>(r.buckets_in_backward), static_cast<long long>(r.buckets));
  }
  EXPECT_GT(r.buckets_in_backward, r.buckets / 2) << name;
  EXPECT_LT(r.buckets_in_backward, r.buckets) << name;
}

// A pipelined run `r` (named `name`) against the serial one: its losses and gradient norms
// within kLossRel, this rank's weights (TP rank tp_rank of tp) within the bounds kWeightAbs,
// kWeightRel; rank `me` 0 prints the worst differences.
void ExpectOnSerialCurve(const Result& r, const Result& serial, const char* name, int tp_rank,
                         int tp, int me) {
  const double loss = testing::WorstRelative(r.losses, serial.losses);
  const double norm = testing::WorstRelative(r.grad_norms, serial.grad_norms);
  const double weight =
      testing::WorstShardDifference(r.last_by_name, serial.first_by_name, serial.last_by_name,
                                    tp_rank, tp, 32, kWeightAbs, kWeightRel);
  if (me == 0) {
    std::printf(
        "%s: worst relative loss difference %.3g, grad norm %.3g, weight difference / bound "
        "%.3g\n",
        name, loss, norm, weight);
  }
  EXPECT_LT(loss, kLossRel) << name;
  EXPECT_LT(norm, kLossRel) << name;
  EXPECT_LT(weight, 1.0) << name;
}

TEST_F(MpiTest, PipelineCurvesAndWeightsMatchSerial) {
  ASSERT_EQ(comm_->size(), 4) << "run with 4 ranks";
  const int me = comm_->rank();
  absl::StatusOr<FourRanks> ranks = SplitFourRanks(*comm_);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  const std::string& data = ranks->data;
  const Result serial = Train(*ranks->self, Config(1, 1), data);
  ASSERT_EQ(serial.losses.size(), static_cast<size_t>(kIters));
  EXPECT_LT(serial.losses.back(), serial.losses.front() - 0.5);  // It learns.
  struct Case {
    const char* name;
    comm::Communicator* world;
    testing::HarnessConfig config;
    int tp_rank;
  };
  // Buckets of 1000 elements, laid out from the end of each stage's buffer: the tied word
  // embedding (56 x 32 at the start of both stages' buffers) spans buckets whose DP shards split
  // it at other rows on the two stages, so each stage owns other parts of its copy.
  testing::HarnessConfig distributed = Config(1, 2);
  distributed.optimizer.use_distributed_optimizer = true;
  distributed.optimizer.dp_bucket_elements = 1000;
  testing::HarnessConfig data_parallel = Config(1, 2);
  data_parallel.optimizer.dp_bucket_elements = 1000;
  testing::HarnessConfig sequence_parallel = Config(2, 2);
  sequence_parallel.model_options.sequence_parallel = true;
  testing::HarnessConfig recomputing = Config(1, 2);
  recomputing.keep_activations = false;
  testing::HarnessConfig interleaved_recomputing = Config(1, 2, 1);
  interleaved_recomputing.keep_activations = false;
  // Activation checkpointing per stage: full (each layer's forward again in backward) and
  // selective (the attention core again), with the same dropout masks.
  testing::HarnessConfig full_recompute = Config(1, 2);
  full_recompute.model_options.recompute = nn::Recompute::kYes;
  testing::HarnessConfig selective_recompute = Config(2, 2, 1);
  selective_recompute.model_options.recompute = nn::Recompute::kSelective;
  const Case cases[] = {
      {"PP=2", ranks->pair.get(), Config(1, 2), 0},
      {"PP=2 x TP=2, sequence parallel", comm_.get(), sequence_parallel, me % 2},
      {"PP=2 x DP=2, distributed optimizer", comm_.get(), distributed, 0},
      {"PP=2 x TP=2", comm_.get(), Config(2, 2), me % 2},
      {"PP=2 x DP=2", comm_.get(), data_parallel, 0},
      {"PP=2 interleaved (2 virtual stages)", ranks->pair.get(), Config(1, 2, 1), 0},
      {"PP=2, recomputing at the stage boundary", ranks->pair.get(), recomputing, 0},
      {"PP=2 interleaved, recomputing", ranks->pair.get(), interleaved_recomputing, 0},
      {"PP=2, full activation recomputation", ranks->pair.get(), full_recompute, 0},
      {"PP=2 x TP=2 interleaved, selective recomputation", comm_.get(), selective_recompute,
       me % 2},
  };
  for (const Case& k : cases) {
    const Result r = Train(*k.world, k.config, data);
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(kIters)) << k.name;
    ExpectOnSerialCurve(r, serial, k.name, k.tp_rank, k.config.tp, me);
    ExpectRecomputedForwards(r, k.config, me, k.name);
    ExpectOverlappedBuckets(r, k.config, me, k.name);
  }
}

// An output layer of its own (--untie_embeddings_and_output_weights, Llama's lm_head: a
// vocab-parallel [padded_vocab, hidden] weight on the last stage only, the word embedding on the
// first only): TP=2, PP=2 and PP=2 x TP=2 follow the serial untied run's curves and weights within
// the tolerances above, so its backward (the output layer's gradient, the input gradient it
// sends back, the embedding's gradient now from the input side alone) is the serial one's.
TEST_F(MpiTest, UntiedOutputLayerMatchesSerial) {
  ASSERT_EQ(comm_->size(), 4) << "run with 4 ranks";
  const int me = comm_->rank();
  absl::StatusOr<FourRanks> ranks = SplitFourRanks(*comm_);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  auto untied = [](testing::HarnessConfig c) {
    c.model.untie_embeddings_and_output_weights = true;
    return c;
  };
  const Result serial = Train(*ranks->self, untied(Config(1, 1)), ranks->data);
  ASSERT_EQ(serial.losses.size(), static_cast<size_t>(kIters));
  EXPECT_LT(serial.losses.back(), serial.losses.front() - 0.5);  // It learns.
  // The untied run is another model: its output layer's weights exist and moved.
  ASSERT_EQ(serial.last_by_name.count("output_layer.weight"), 1u);
  const struct {
    const char* name;
    comm::Communicator* world;
    testing::HarnessConfig config;
    int tp_rank;
  } cases[] = {
      {"untied, TP=2", ranks->pair.get(), untied(Config(2, 1)), me % 2},
      {"untied, PP=2", ranks->pair.get(), untied(Config(1, 2)), 0},
      {"untied, PP=2 x TP=2", comm_.get(), untied(Config(2, 2)), me % 2},
  };
  for (const auto& k : cases) {
    const Result r = Train(*k.world, k.config, ranks->data);
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(kIters)) << k.name;
    ExpectOnSerialCurve(r, serial, k.name, k.tp_rank, k.config.tp, me);
    // The last stage (or the whole model) holds the output layer, the first stage of two not
    // (ranks are TP-fastest, then PP: stage = rank / TP in the case's world).
    const int stage = k.world->rank() / k.config.tp;
    EXPECT_EQ(r.last_by_name.count("output_layer.weight"), stage == k.config.pp - 1 ? 1u : 0u)
        << k.name;
  }
}

// Per iteration, each stage boundary carries one activation forward and one gradient back per
// micro-batch per model chunk: stage s of P sends m * V activations (not the last virtual stage)
// and m * V gradients (not the first), and receives as many.
TEST_F(MpiTest, SendsAndReceivesPerMicroBatch) {
  ASSERT_EQ(comm_->size(), 4) << "run with 4 ranks";
  const int me = comm_->rank();
  const std::string data = MakeCorpus(me);
  for (int V : {1, 2}) {
    // PP=4 (one layer per stage) or PP=2 with 2 chunks; m = 8 / 2 = 4 micro-batches.
    const int pp = V == 1 ? 4 : 2;
    auto group = comm_->Split(V == 1 ? 0 : me / 2, me, "group");
    ASSERT_TRUE(group.ok());
    testing::HarnessConfig c = Config(1, pp, V == 1 ? 0 : 1);
    c.end = 3;
    const Result r = Train(**group, c, data);
    const int s = V == 1 ? me : me % 2;
    const int64_t m = kGlobal / kMicro, per_iteration = m * V;
    const bool first = s == 0, last = s == pp - 1;
    // Virtual stages with a successor: all V chunks, but the very last one on the last stage.
    const int64_t forward_links = last ? V - 1 : V, backward_links = first ? V - 1 : V;
    EXPECT_EQ(r.pp_counters.send, c.end * m * (forward_links + backward_links))
        << "stage " << s << " V " << V;
    EXPECT_EQ(r.pp_counters.recv, c.end * m * (forward_links + backward_links))
        << "stage " << s << " V " << V;
    // As many instances of each chunk as its peak of micro-batches in flight, the activation
    // sets the memory model counts.
    auto in_flight = comm::PipelineInFlightMicroBatches(pp, s, V, m);
    ASSERT_TRUE(in_flight.ok()) << in_flight.status();
    EXPECT_EQ(r.pipeline.instances, in_flight->chunk_peak_sum()) << "stage " << s << " V " << V;
    EXPECT_EQ(r.pipeline.recomputed, 0) << "stage " << s << " V " << V;
    (void)per_iteration;
  }
}

// f16 with dynamic loss scaling at PP=2: an overflow in one stage's gradients (injected on the
// first stage only, or the last only) makes both stages skip the same step and halve the same
// scale, because the gradient norm that detects it is summed over the pipeline; the curves then
// match the serial run that overflows at the same step (within float32 rounding), and the two
// runs match each other bit for bit.
TEST_F(MpiTest, AnOverflowInOneStageIsSkippedByAll) {
  ASSERT_EQ(comm_->size(), 4) << "run with 4 ranks";
  absl::StatusOr<FourRanks> ranks = SplitFourRanks(*comm_);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  const std::string& data = ranks->data;
  testing::HarnessConfig c = Config(1, 1);
  c.end = 6;
  c.compute_dtype = DType::kF16;
  c.scaler.dynamic = true;
  c.scaler.initial_scale = 1024;  // No overflow of its own at this size.
  c.scaler.hysteresis = 1;
  c.inject_grad_overflow_at = 2;
  const Result serial = Train(*ranks->self, c, data);
  c.pp = 2;
  std::vector<Result> staged;
  for (int stage : {0, 1}) {
    c.inject_grad_overflow_rank = stage;  // The pair's rank: its stage.
    staged.push_back(Train(*ranks->pair, c, data));
  }
  ASSERT_EQ(serial.losses.size(), static_cast<size_t>(c.end));
  EXPECT_EQ(serial.skipped, 1);
  for (const Result& r : staged) {
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(c.end));
    EXPECT_EQ(r.skipped, 1);
    EXPECT_EQ(r.skipped_so_far, serial.skipped_so_far);
    EXPECT_EQ(r.scales, serial.scales);
    EXPECT_FALSE(std::isfinite(r.grad_norms[2]));
    EXPECT_LT(testing::WorstRelative(r.losses, serial.losses), kLossRel);
  }
  EXPECT_EQ(staged[0].losses, staged[1].losses);
  EXPECT_EQ(staged[0].scales, staged[1].scales);
}

// bf16 at PP=2 x DP=2: the distributed optimizer also shards the f32 masters (the compute copies
// all-gathered, the tied embedding's copy broadcast from the first stage, the norms' masters kept
// whole); without clipping (whose norm the shards sum in another order) every DP sum has two
// terms either way, so the run is the unsharded optimizer's bit for bit (losses, compute copies,
// masters) except for the tied word embedding's masters: its gradient is summed over the two
// stages before the DP reduce-scatter, not after the all-reduce, (a0 + a1) + (b0 + b1) against
// (a0 + b0) + (a1 + b1), a reassociation bounded as the curve test bounds them (the bf16
// rounding of the compute copies absorbs it here).
TEST_F(MpiTest, ShardedMastersMatchUnshardedWithPipelineStages) {
  ASSERT_EQ(comm_->size(), 4) << "run with 4 ranks";
  const std::string data = MakeCorpus(comm_->rank());
  testing::HarnessConfig plain = Config(1, 2);
  plain.end = 8;
  plain.compute_dtype = DType::kBF16;
  plain.optimizer.clip_grad = 0;
  plain.optimizer.dp_bucket_elements = 1000;
  testing::HarnessConfig sharded = plain;
  sharded.optimizer.use_distributed_optimizer = true;
  const Result a = Train(*comm_, sharded, data);
  const Result b = Train(*comm_, plain, data);
  ASSERT_EQ(a.losses.size(), static_cast<size_t>(plain.end));
  EXPECT_TRUE(a.masters_sharded);
  EXPECT_FALSE(b.masters_sharded);
  EXPECT_EQ(a.losses, b.losses);
  double tied = 0;
  for (const auto& [name, values] : a.last_by_name) {
    const std::vector<float>& want = b.last_by_name.at(name);
    ASSERT_EQ(values.size(), want.size()) << name;
    if (name != "embedding.word.weight") {
      EXPECT_EQ(values, want) << name;
      continue;
    }
    for (size_t k = 0; k < values.size(); ++k) {
      tied = std::max(tied, std::fabs(double{values[k]} - want[k]));
    }
  }
  EXPECT_LT(tied, plain.end * 3e-3 * 1e-3);
  if (comm_->rank() == 0) {
    std::printf("sharded bf16 masters, PP=2 x DP=2: tied embedding worst difference %.3g\n", tied);
  }
  EXPECT_EQ(a.last_compute, b.last_compute);
  EXPECT_NE(a.first_values, a.last_values);
}

}  // namespace
}  // namespace train
}  // namespace mt
