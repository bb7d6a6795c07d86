#include "train/testing/training_harness.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/device_context.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/indexed/indexed_dataset.h"
#include "data/testing/synthetic_corpus.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "models/stages.h"
#include "train/batches.h"
#include "train/testing/fault_hooks.h"
#include "train/training_state.h"

namespace mt {
namespace train {
namespace testing {

namespace {

// Reports a failed status as a test failure; true if it was OK.
bool Ok(const absl::Status& s, const char* what) {
  if (s.ok()) return true;
  ADD_FAILURE() << what << ": " << s;
  return false;
}

// The run's device: the CPU, or cuda:0 with a caching allocator.
struct Device {
  std::unique_ptr<cuda::DeviceContext> context;
  std::unique_ptr<cuda::CachingAllocator> pool;
  ExecContext ec;
};

absl::Status SetUpDevice(bool gpu, Device* d) {
  if (!gpu) return absl::OkStatus();
  ASSIGN_OR_RETURN(d->context, cuda::DeviceContext::Create(0));
  d->ec.device = mt::Device::Cuda(0);
  d->ec.cuda = d->context.get();
  d->pool = std::make_unique<cuda::CachingAllocator>(cuda::CachingAllocator::CudaBackend(0));
  d->ec.memory_pool = d->pool.get();
  return absl::OkStatus();
}

void Record(const Trainer& trainer, HarnessResult* out) {
  for (const LogRecord& r : trainer.history()) {
    out->losses.push_back(r.loss.total);
    out->parts.push_back(r.loss.parts);
    out->grad_norms.push_back(r.grad_norm);
    out->lrs.push_back(r.learning_rate);
    out->scales.push_back(r.loss_scale);
    out->skipped_so_far.push_back(r.skipped_iterations);
  }
  out->skipped = trainer.skipped_iterations();
}

// The whole f32 masters (gathered over DP when the optimizer shards them).
std::vector<float> Masters(const nn::ParameterStore& store, const Optimizer& opt,
                           const ExecContext& ec) {
  Tensor host = Tensor::Host({store.NumLocalElements()}, DType::kF32);
  if (!Ok(opt.GatherValues(ec, host.view()), "gathering the masters")) return {};
  return std::vector<float>(host.data_as<float>(), host.data_as<float>() + host.numel());
}

std::vector<double> ComputeCopies(const nn::ParameterStore& store, const ExecContext& ec) {
  auto host = CopyToHost(ec, store.flat_compute_values());
  if (!Ok(host.status(), "copying the compute copies")) return {};
  return ::mt::testing::ToDoubles(host->view());
}

TrainerConfig MakeTrainerConfig(const HarnessConfig& c) {
  TrainerConfig tc;
  tc.micro_batch_size = c.micro_batch_size;
  tc.global_batch_size = c.global_batch_size;
  tc.seq_length = c.seq_length;
  tc.train_iters = c.end;
  tc.quiet = true;
  return tc;
}

// Splits the first and last masters by parameter name.
void RecordByName(const nn::ParameterStore& store, HarnessResult* out) {
  if (out->last_values.empty() || out->first_values.empty()) return;
  for (int i = 0; i < store.size(); ++i) {
    const int64_t n = NumElements(store.local_shape(i));
    const float* first = out->first_values.data() + store.offset(i);
    const float* last = out->last_values.data() + store.offset(i);
    out->first_by_name[store.spec(i).name].assign(first, first + n);
    out->last_by_name[store.spec(i).name].assign(last, last + n);
  }
}

// The model options of the run: the config's, at its CP size.
models::ModelOptions OptionsOf(const HarnessConfig& c) {
  models::ModelOptions o = c.model_options;
  o.context_parallel = c.cp;
  return o;
}

}  // namespace

std::vector<double> HarnessResult::Part(size_t k) const {
  std::vector<double> out;
  for (const std::vector<double>& p : parts) out.push_back(k < p.size() ? p[k] : NAN);
  return out;
}

HarnessResult RunTraining(comm::Communicator& world, const HarnessConfig& c,
                          const MakeBatches& make_batches) {
  HarnessResult out;
  const comm::ParallelConfig pc{c.tp, c.pp, c.cp};
  auto split = comm::MakePipelineSplit(c.model.num_layers, c.pp, c.layers_per_virtual_stage);
  if (!Ok(split.status(), "pipeline split")) return out;
  auto parallel = comm::ParallelContext::Create(world, pc, c.model.num_attention_heads);
  if (!Ok(parallel.status(), "parallel layout")) return out;
  Device d;
  if (!Ok(SetUpDevice(c.gpu, &d), "device")) return out;
  data::LoaderConfig lc;
  lc.micro_batch_size = c.micro_batch_size;
  lc.global_batch_size = c.global_batch_size;
  lc.data_parallel_size = (*parallel)->dp_size();
  lc.data_parallel_rank = (*parallel)->dp_rank();
  lc.consumed_samples = c.start * c.global_batch_size;
  auto batches = make_batches(lc);
  if (!Ok(batches.status(), "batches")) return out;

  nn::ParameterStore store((*parallel)->tp_rank(), c.tp, c.compute_dtype, d.ec.device);
  const models::ModelOptions options = OptionsOf(c);
  auto chunks = models::CreateStageModels(c.model, &store, options, *split, (*parallel)->pp_rank());
  if (!Ok(chunks.status(), "model") || !Ok(store.Allocate(c.init_seed), "allocation")) return out;
  std::vector<models::Model*> chunk_ptrs;
  for (const auto& m : *chunks) chunk_ptrs.push_back(m.get());
  models::Model* model = chunk_ptrs.front();
  ChunkFactory more_chunks;
  if (c.pp > 1 && c.keep_activations) {
    auto factory = StageChunkFactory(c.model, &store, options, *split, (*parallel)->pp_rank());
    if (!Ok(factory.status(), "chunk factory")) return out;
    more_chunks = *std::move(factory);
  }
  auto opt = Optimizer::Create(&store, c.optimizer, &(*parallel)->dp_cp());
  if (!Ok(opt.status(), "optimizer")) return out;
  LrSchedule schedule(c.lr);
  LossScaler scaler(c.scaler);
  TrainingCounters counters;
  if (!c.load.empty()) {
    if (c.pp > 1) ADD_FAILURE() << "checkpoints with pipeline stages are not supported";
    if (!Ok(LoadTrainingState(c.load, **parallel, c.model, &store, &*opt, &scaler, &schedule,
                              &counters),
            "loading the checkpoint")) {
      return out;
    }
    EXPECT_EQ(counters.iteration, c.start);
  }
  GradOverflow overflow(c.inject_grad_overflow_at, c.inject_grad_overflow_rank);
  auto trainer = Trainer::Create(MakeTrainerConfig(c),
                                 {parallel->get(), &d.ec, model, &store, &*opt, &schedule, &scaler,
                                  chunk_ptrs, more_chunks, &overflow});
  if (!Ok(trainer.status(), "trainer")) return out;
  (*trainer)->set_consumed_samples(c.start * c.global_batch_size);
  out.first_values = Masters(store, *opt, d.ec);
  out.first_compute = ComputeCopies(store, d.ec);
  (*parallel)->dp().ResetCounters();
  Ok((*trainer)->Train(**batches, c.start, nullptr, nullptr), "training");
  out.dp_calls = (*parallel)->dp().counters();
  Record(**trainer, &out);
  out.final_scale = scaler.scale();
  out.schedule_samples = schedule.samples();
  out.buckets = opt->grad_reducer().num_buckets();
  out.masters_sharded = opt->masters_sharded();
  out.moments_sharded = opt->distributed();
  out.buckets_in_backward = opt->grad_reducer().buckets_started_in_backward();
  out.last_values = Masters(store, *opt, d.ec);
  out.last_compute = ComputeCopies(store, d.ec);
  RecordByName(store, &out);
  out.pp_counters = (*parallel)->pp().counters();
  out.pipeline = (*trainer)->pipeline_totals();
  if (!c.save.empty()) {
    counters.iteration = c.end;
    counters.consumed_samples = (*trainer)->consumed_samples();
    counters.skipped_iterations = (*trainer)->skipped_iterations();
    Ok(SaveTrainingState(c.save, 2, **parallel, c.model, store, *opt, scaler, schedule, counters),
       "saving the checkpoint");
  }
  return out;
}

MakeBatches GptBatches(const std::string& prefix, int64_t seq_length, int64_t num_samples,
                       uint64_t seed) {
  return [=](const data::LoaderConfig& lc) -> absl::StatusOr<std::unique_ptr<BatchStream>> {
    ASSIGN_OR_RETURN(auto indexed, data::IndexedDataset::Open(prefix));
    data::GptDatasetConfig dc;
    dc.split = "1";
    dc.seq_len = seq_length;
    dc.num_samples = num_samples;
    dc.seed = seed;
    ASSIGN_OR_RETURN(auto ds, data::GptDataset::Create(
                                  std::shared_ptr<const data::IndexedDataset>(std::move(indexed)),
                                  data::Split::kTrain, dc));
    ASSIGN_OR_RETURN(
        auto loader,
        data::Loader::Create(
            data::GptSampleSource(std::shared_ptr<const data::GptDataset>(std::move(ds))), lc));
    return LanguageModelBatches(std::move(loader));
  };
}

std::string WriteGptCorpus(const std::string& name, int rank, int vocab, int documents) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string prefix = absl::StrCat(tmp ? tmp : "/tmp", "/", name, "_rank", rank);
  data::testing::SyntheticCorpusConfig c;
  c.documents = documents;
  c.vocab = vocab;
  c.min_length = 10;
  c.length_spread = 50;
  Ok(data::testing::WriteSyntheticCorpus(prefix, c), "writing the corpus");
  return prefix;
}

namespace {

// This rank's shard of a serial parameter, as (offset in the shard, values) pairs: the serial
// tensor sliced along dimension 0 (a block of rows) or, with cols > 0, along dimension 1 of its
// [size / cols, cols] view, for tp_rank of tp. The word embedding's rows are padded to a multiple
// of 8 x TP, so a TP shard may reach past the serial rows: only the rows both hold are compared.
std::vector<std::pair<size_t, float>> SerialShard(const std::vector<float>& full, size_t shard_size,
                                                  int tp_rank, int tp, int64_t cols) {
  std::vector<std::pair<size_t, float>> out;
  if (cols <= 0) {
    const size_t begin = tp_rank * shard_size;
    for (size_t k = 0; k < shard_size && begin + k < full.size(); ++k) {
      out.emplace_back(k, full[begin + k]);
    }
    return out;
  }
  const int64_t c = cols / tp, rows = static_cast<int64_t>(full.size()) / cols;
  if (rows * c != static_cast<int64_t>(shard_size)) return out;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < c; ++j) out.emplace_back(i * c + j, full[i * cols + tp_rank * c + j]);
  }
  return out;
}

}  // namespace

double WorstShardDifference(const std::map<std::string, std::vector<float>>& staged,
                            const std::map<std::string, std::vector<float>>& serial_first,
                            const std::map<std::string, std::vector<float>>& serial_last,
                            int tp_rank, int tp, int64_t hidden, double abs_bound,
                            double rel_bound) {
  double worst = 0;
  for (const auto& [name, mine] : staged) {
    const auto it = serial_last.find(name);
    const auto init = serial_first.find(name);
    EXPECT_NE(it, serial_last.end()) << name;
    if (it == serial_last.end() || init == serial_first.end()) continue;
    double moved = 0;
    for (size_t k = 0; k < it->second.size(); ++k) {
      moved = std::max(moved, std::fabs(double{it->second[k]} - init->second[k]));
    }
    const bool replicated = mine.size() == it->second.size();
    double best = INFINITY;
    for (int64_t cols : {int64_t{0}, static_cast<int64_t>(it->second.size()) / hidden}) {
      if (replicated && cols > 0) continue;
      const auto want = replicated ? SerialShard(it->second, mine.size(), 0, 1, 0)
                                   : SerialShard(it->second, mine.size(), tp_rank, tp, cols);
      if (want.empty()) continue;
      double d = 0;
      for (const auto& [k, w] : want) d = std::max(d, std::fabs(double{mine[k]} - w));
      best = std::min(best, d / (abs_bound + rel_bound * moved));
    }
    EXPECT_TRUE(std::isfinite(best)) << name;
    worst = std::max(worst, best);
  }
  return worst;
}

models::ModelConfig TinyModel(models::Family family, int64_t vocab, int64_t positions) {
  models::ModelConfig c = models::ModelConfig::Sized(family, 2, 32, 4, vocab, positions);
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  return c;
}

std::unique_ptr<comm::Communicator> Alone(comm::Communicator& world) {
  absl::StatusOr<std::unique_ptr<comm::Communicator>> self = world.Split(world.rank(), 0, "self");
  if (!self.ok()) {
    ADD_FAILURE() << "a communicator of rank " << world.rank() << " alone: " << self.status();
    return nullptr;
  }
  return std::move(*self);
}

double WorstRelative(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  }
  return worst;
}

}  // namespace testing
}  // namespace train
}  // namespace mt
