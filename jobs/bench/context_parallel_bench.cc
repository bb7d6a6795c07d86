// Context parallelism, measured (docs/perf/context_parallel.md). Under mpirun -np C with
// --context_parallel_size=C (C = 1: one process, plain attention), one training micro-batch of
// --seq_length tokens through a GPT-family model (--model, the model flags), each CP rank its two
// chunks of every sequence:
//   - activation memory per rank, from the host allocator (core/tensor.h HostTensorMemory, every
//     CPU tensor of the process), above the parameters and gradients in use before the first
//     step: the bytes a training forward leaves held, and the peak over it and a forward and
//     backward,
//     beside //models:describe's prediction at the same CP (models/memory.h: this stack's held
//     figure, the layers and residual streams, and the paper's count);
//   - the time of a forward and backward with the ring's key/value exchange overlapped with the
//     attention of the block in hand, and without (each exchange waited for first), in
//     alternating steps after a warm-up of each; the median of --steps each, and their ratio.
//
//   bazel-bin/jobs/bench/context_parallel_bench --seq_length=4096
//   mpirun -np 2 bazel-bin/jobs/bench/context_parallel_bench --context_parallel_size=2
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_main.h"
#include "comm/parallel_context.h"
#include "core/config_flags.h"
#include "core/rank_execution.h"
#include "core/status.h"
#include "core/tensor.h"
#include "models/memory.h"
#include "models/model.h"
#include "models/registry.h"

namespace mt {
namespace jobs {
namespace {

struct CpBenchConfig {
  std::string model_name;
  models::ModelConfig model;
  int64_t seq_length = 4096;
  int64_t micro_batch_size = 1;
  int context_parallel_size = 1;
  int steps = 3;
  int threads = 0;

  CpBenchConfig() {
    model.num_layers = 4;
    model.hidden_size = 256;
    model.num_attention_heads = 4;
    model.vocab_size = 512;
    model.make_vocab_size_divisible_by = 128;
    model.hidden_dropout = 0.1f;
    model.attention_dropout = 0.0f;  // The ring has none.
  }

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("model", &self.model_name,
      "A registered GPT-family model; the model flags given override it (default: 4 layers, "
      "hidden 256, 4 heads, vocabulary 512).");
    models::ModelConfig::Fields(self.model, v);
    v("seq_length", &self.seq_length, "Sequence length (divisible by 2 x CP).");
    v("micro_batch_size", &self.micro_batch_size, "Samples in the micro-batch.");
    v("context_parallel_size", &self.context_parallel_size,
      "CP degree: the number of ranks (mpirun -np).");
    v("steps", &self.steps, "Timed forward-and-backward steps of each kind (after a warm-up).");
    v("threads", &self.threads, "Threads per rank (0: cores / ranks).");
  }
};

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The largest of every rank's `value` (one all-gather of i64 over `world`).
absl::StatusOr<int64_t> MaxOverRanks(comm::Communicator& world, int64_t value) {
  Tensor mine = Tensor::Host({1}, DType::kI64), all = Tensor::Host({world.size()}, DType::kI64);
  mine.data_as<int64_t>()[0] = value;
  RETURN_IF_ERROR(world.AllGather(mine.view(), all.view()));
  int64_t m = value;
  for (int r = 0; r < world.size(); ++r) m = std::max(m, all.data_as<int64_t>()[r]);
  return m;
}

struct Measured {
  int64_t held = 0, peak = 0;  // Host tensor bytes above those in use before the step.
  int64_t model_held = 0;      // Model::activation_bytes().held, for reference.
  std::vector<double> overlapped, waited;
};

absl::StatusOr<Measured> Measure(const CpBenchConfig& c, comm::Communicator& world,
                                 models::Model& model, nn::ParameterStore& store,
                                 const models::Batch& batch, nn::StepContext sc) {
  const ExecContext& ec = *sc.exec;
  Measured m;
  // Memory: the model's modules keep their activation buffers between steps (reallocated only when
  // shapes change), so the baseline is before the first step: the parameters and gradients.
  const int64_t before = HostTensorMemory().in_use;
  ResetHostTensorPeak();
  RETURN_IF_ERROR(model.ForwardBackward(sc, batch, models::Backward::kNo).status());
  m.held = HostTensorMemory().in_use - before;
  m.model_held = model.activation_bytes().held;
  RETURN_IF_ERROR(store.ZeroGrads(ec));
  RETURN_IF_ERROR(model.ForwardBackward(sc, batch, models::Backward::kYes).status());
  m.peak = HostTensorMemory().peak - before;
  // Time: alternate overlapped and waited steps; the first of each kind warms up.
  for (int step = 0; step < 2 * (c.steps + 1); ++step) {
    sc.cp_overlap = step % 2 == 0;
    sc.micro_step = static_cast<uint64_t>(step);
    RETURN_IF_ERROR(store.ZeroGrads(ec));
    RETURN_IF_ERROR(world.Barrier());
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(model.ForwardBackward(sc, batch, models::Backward::kYes).status());
    RETURN_IF_ERROR(world.Barrier());
    if (step >= 2) (sc.cp_overlap ? m.overlapped : m.waited).push_back(Seconds(start));
  }
  return m;
}

absl::Status Report(const CpBenchConfig& c, comm::Communicator& world, const Measured& m,
                    int threads) {
  ASSIGN_OR_RETURN(const int64_t held, MaxOverRanks(world, m.held));
  ASSIGN_OR_RETURN(const int64_t peak, MaxOverRanks(world, m.peak));
  if (world.rank() != 0) return absl::OkStatus();
  models::MemoryOptions mo;
  mo.seq_length = c.seq_length;
  mo.micro_batch = c.micro_batch_size;
  mo.context_parallel = c.context_parallel_size;
  ASSIGN_OR_RETURN(const models::MemoryEstimate est, models::EstimateMemory(c.model, mo));
  const models::StageMemory& stage = est.stages.front();
  constexpr double kMiB = 1048576.0;
  std::printf(
      "config: layers=%d hidden=%lld heads=%d vocab=%lld seq=%lld batch=%lld cp=%d "
      "threads/rank=%d f32\n",
      c.model.num_layers, static_cast<long long>(c.model.hidden_size), c.model.num_attention_heads,
      static_cast<long long>(c.model.vocab_size), static_cast<long long>(c.seq_length),
      static_cast<long long>(c.micro_batch_size), c.context_parallel_size, threads);
  std::printf(
      "activation memory per rank (host allocator, largest rank): held after forward %.1f MiB, "
      "peak over forward and backward %.1f MiB (the model's own count of its layers: %.1f MiB)\n",
      held / kMiB, peak / kMiB, m.model_held / kMiB);
  std::printf(
      "describe's prediction at cp=%d: this stack's layers and residual streams %.1f MiB; the "
      "paper's count (with the embedding and the output layer) %.1f MiB\n",
      c.context_parallel_size, stage.held / kMiB, stage.activations / kMiB);
  if (c.context_parallel_size > 1) {
    const double o = Median(m.overlapped), w = Median(m.waited);
    std::printf(
        "forward+backward (median of %d): exchange overlapped %.3f s, waited for first %.3f s, "
        "overlapped / waited %.3f\n",
        c.steps, o, w, o / w);
  } else {
    std::printf("forward+backward (median of %d): %.3f s\n", c.steps, Median(m.overlapped));
  }
  return absl::OkStatus();
}

absl::Status Run(const CpBenchConfig& c, const comm::MpiProcess& process) {
  comm::Communicator& world = process.world;
  comm::ParallelConfig pc;
  pc.context_parallel = c.context_parallel_size;
  if (world.size() != c.context_parallel_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("run with --context_parallel_size=", world.size(), " (the number of ranks)"));
  }
  ASSIGN_OR_RETURN(auto parallel,
                   comm::ParallelContext::Create(world, pc, c.model.num_attention_heads));
  RankExecutionOptions ro;
  ro.threads = c.threads;
  ro.local_rank = process.local_rank;
  ro.local_size = process.local_size;
  ASSIGN_OR_RETURN(RankExecution rank, CreateRankExecution(ro));
  nn::ParameterStore store(0, 1, DType::kF32, rank.exec.device);
  models::ModelOptions options;
  options.context_parallel = c.context_parallel_size;
  ASSIGN_OR_RETURN(auto model, models::CreateModel(c.model, &store, options));
  RETURN_IF_ERROR(store.Allocate(1));
  const int64_t B = c.micro_batch_size, T = c.seq_length;
  Tensor tokens = Tensor::Host({B, T}, DType::kI32), labels = Tensor::Host({B, T}, DType::kI32);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % c.model.vocab_size);
    labels.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % c.model.vocab_size);
  }
  nn::StepContext sc = nn::StepContext::Train(&rank.exec, nullptr, 1);
  sc.cp = parallel->cp_or_null();
  ASSIGN_OR_RETURN(const Measured m,
                   Measure(c, world, *model, store,
                           models::LanguageModelBatch(tokens.view(), labels.view()), sc));
  return Report(c, world, m, rank.threads);
}

absl::Status Resolve(const ConfigFlags<CpBenchConfig>& flags, CpBenchConfig* c) {
  RETURN_IF_ERROR(flags.ApplyGiven(c));
  if (!c->model_name.empty()) {
    ASSIGN_OR_RETURN(const models::RegisteredModel m, models::FindModel(c->model_name));
    c->model = m.config;
    c->model.attention_dropout = 0;
    RETURN_IF_ERROR(flags.ApplyGiven(c));
  }
  if (!FlagGiven("max_position_embeddings")) c->model.max_position_embeddings = c->seq_length;
  if (c->model.family != models::Family::kGpt2) {
    return absl::InvalidArgumentError("context_parallel_bench runs GPT-family models");
  }
  if (c->steps < 1) return absl::InvalidArgumentError("--steps must be >= 1");
  return comm::ValidateContextParallelSequence(c->context_parallel_size, c->seq_length, 1, false);
}

}  // namespace
}  // namespace jobs
}  // namespace mt

int main(int argc, char** argv) {
  using mt::jobs::CpBenchConfig;
  CpBenchConfig config;
  const mt::ConfigFlags<CpBenchConfig> flags(config, {"family", "compute_dtype"});
  return mt::comm::MpiMain(
      argc, argv,
      {"context_parallel_bench",
       "Activation memory per rank and the ring's overlap under context parallelism."},
      [&](int) { return mt::jobs::Resolve(flags, &config); },
      [&](const mt::comm::MpiProcess& p) -> absl::StatusOr<int> {
        RETURN_IF_ERROR(mt::jobs::Run(config, p));
        return 0;
      });
}
