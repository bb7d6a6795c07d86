// The README's main job:  ./bazelw run //experiments/quickstart
//
// On the embedded default corpus (the Debian fortunes text), tokenised into a GPT-2 indexed
// dataset if needed, trains a small GPT-2 with tensor parallelism over MPI ranks (it relaunches
// itself under mpirun), reports the falling loss and the validation perplexity against the unigram
// baseline, saves a checkpoint, and prints a generated sample.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_main.h"
#include "core/config_flags.h"
#include "core/status.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/indexed/indexed_dataset.h"
#include "data/preprocessing/default_data.h"
#include "experiments/common/eval_runs.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "jobs/pretrain/driver.h"
#include "jobs/pretrain/pretrain_gpt.h"

DEFINE_string(prompt, "", "Old spelling of --generate.");

namespace {

// Relaunches this binary under mpirun with `np` ranks (the project's one local mpirun command
// line), forwarding the arguments.
int Relaunch(int np, int argc, char** argv) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "quickstart: error: cannot find this binary's path to relaunch it\n");
    return 1;
  }
  self[n] = '\0';
  mt::experiments::AllowMpirunAsRoot();
  std::vector<std::string> args = mt::experiments::LocalMpirun(np);
  args.push_back(self);
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::printf("quickstart: launching %d ranks: mpirun -np %d %s\n", np, np, self);
  std::fflush(stdout);
  execvp("mpirun", cargs.data());
  std::fprintf(stderr,
               "quickstart: error: cannot run mpirun (install openmpi-bin; ./bazelw does), or "
               "pass --tensor_model_parallel_size=1\n");
  return 1;
}

// Cross-entropy (nats/token) of the validation documents under the add-one-smoothed unigram
// distribution of the training documents: the loss a model that ignores context would reach.
absl::StatusOr<double> UnigramBaseline(const std::string& prefix, const std::string& split,
                                       int64_t vocab) {
  ASSIGN_OR_RETURN(auto data, mt::data::IndexedDataset::Open(prefix));
  ASSIGN_OR_RETURN(auto bounds, mt::data::SplitDocuments(split, data->num_documents()));
  std::vector<double> counts(vocab, 1.0);
  double total = static_cast<double>(vocab);
  for (int64_t d = bounds[0]; d < bounds[1]; ++d) {
    const auto doc = data->document(d);
    for (int64_t i = 0; i < doc.size(); ++i) {
      counts[doc[i]] += 1;
      total += 1;
    }
  }
  double nll = 0;
  int64_t n = 0;
  for (int64_t d = bounds[1]; d < bounds[2]; ++d) {
    const auto doc = data->document(d);
    for (int64_t i = 0; i < doc.size(); ++i, ++n) nll -= std::log(counts[doc[i]] / total);
  }
  if (n == 0) return absl::FailedPreconditionError("no validation tokens");
  return nll / static_cast<double>(n);
}

// The quickstart's defaults: a 4-layer GPT-2 trained for 200 steps at TP=2 with a short warmup
// and cosine decay, evaluated three times, checkpointed next to the data, and sampled.
mt::jobs::PretrainGptConfig QuickstartDefaults() {
  mt::jobs::PretrainGptConfig c;
  c.model.max_position_embeddings = c.trainer.seq_length;  // 128.
  c.tensor_model_parallel_size = 2;
  c.trainer.train_iters = 200;
  c.trainer.eval_iters = 8;
  c.lr.max_lr = 3e-3;
  c.split = "949,50,1";
  c.keep_last = 1;
  c.generate_prompt = "The best way to";
  c.generate_tokens = 40;
  return c;
}

// The settings that follow from others unless given: the schedule and the log and evaluation
// intervals from train_iters, the checkpoint directory from the data directory.
void DeriveSettings(mt::jobs::PretrainGptConfig* c) {
  using mt::FlagGiven;
  const int64_t iters = c->trainer.train_iters, samples = iters * c->trainer.global_batch_size;
  if (!FlagGiven("log_interval")) c->trainer.log_interval = std::max<int64_t>(1, iters / 12);
  if (!FlagGiven("min_lr")) c->lr.min_lr = c->lr.max_lr / 10;
  if (!FlagGiven("lr_warmup_samples")) c->lr.warmup_samples = samples / 10;
  if (!FlagGiven("lr_decay_samples")) c->lr.decay_samples = samples;
  if (!FlagGiven("eval_interval")) c->eval_interval = std::max<int64_t>(1, iters / 3);
  if (!FlagGiven("max_position_embeddings")) {
    c->model.max_position_embeddings = c->trainer.seq_length;
  }
  if (!FlagGiven("save")) c->save = mt::data::DefaultDataDir() + "/quickstart_checkpoints";
  if (FlagGiven("prompt")) c->generate_prompt = FLAGS_prompt;
}

absl::Status Run(mt::jobs::PretrainGptConfig c, const mt::jobs::LocalRanks& local,
                 mt::comm::Communicator& world) {
  // Data: rank 0 tokenises the corpus if needed; the others wait for it.
  mt::data::DefaultData data;
  if (world.rank() == 0) {
    mt::data::DefaultDataConfig dc;
    ASSIGN_OR_RETURN(data, mt::data::MakeDefaultData(dc));
    std::printf("quickstart: corpus %s -> %s (%s)\n", dc.corpus_dir.c_str(),
                data.gpt2_prefix.c_str(), data.gpt2_built ? "tokenised now" : "up to date");
  }
  RETURN_IF_ERROR(world.Barrier());
  if (world.rank() != 0) {
    data.gpt2_prefix = mt::data::DefaultDataDir() + "/" + mt::data::kGpt2DefaultDataName;
  }
  if (c.data_path.empty()) c.data_path = data.gpt2_prefix;

  double baseline = 0;
  if (world.rank() == 0) {
    ASSIGN_OR_RETURN(baseline, UnigramBaseline(c.data_path, c.split, c.model.vocab_size));
    std::printf(
        "quickstart: unigram baseline on the validation documents: %.4f nats/token "
        "(perplexity %.1f)\n",
        baseline, std::exp(baseline));
  }
  ASSIGN_OR_RETURN(mt::jobs::PretrainResult r, mt::jobs::RunPretrainGpt(c, local, world, nullptr));
  if (world.rank() == 0) {
    std::printf(
        "quickstart: training loss %.3f -> %.3f; validation loss %.3f (perplexity %.1f) vs the "
        "unigram baseline %.3f (perplexity %.1f): %.1f%% lower; checkpoint in %s\n",
        r.first.total, r.last.total, r.valid.loss.total, r.valid.perplexity, baseline,
        std::exp(baseline), 100.0 * (1.0 - r.valid.loss.total / baseline), c.save.c_str());
    if (!r.has_valid || !(r.valid.loss.total < baseline)) {
      return absl::InternalError("the validation loss did not fall below the unigram baseline");
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  using mt::jobs::PretrainGptConfig;
  PretrainGptConfig config = QuickstartDefaults();
  const mt::ConfigFlags<PretrainGptConfig> flags(config, mt::jobs::kNotFlags);
  // The flags and their rules, as on every rank; refused in one line before anything starts.
  auto resolve = [&]() -> absl::Status {
    RETURN_IF_ERROR(mt::jobs::ResolveFlags(&config, [&] { return flags.ApplyGiven(&config); }));
    DeriveSettings(&config);
    return absl::OkStatus();
  };
  constexpr mt::comm::MainInfo kInfo = {
      "quickstart", "Trains a small tensor-parallel GPT-2 on the embedded corpus."};
  // Under a launcher: mpirun sets OMPI_COMM_WORLD_SIZE (and PMIX_RANK); srun --mpi=pmix only
  // PMIX_RANK; srun --mpi=pmi2 PMI_RANK.
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
                        std::getenv("PMIX_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr;
  if (!launched) {
    // Not under a launcher: relaunch under mpirun with a rank per tensor-parallel rank. The flags
    // are read here only to know how many (and --help answered); every rank reads them again at its
    // start-up.
    gflags::SetUsageMessage(kInfo.usage);
    std::vector<char*> original(argv, argv + argc);
    int parsed_argc = argc;
    char** parsed_argv = argv;
    gflags::ParseCommandLineFlags(&parsed_argc, &parsed_argv, /*remove_flags=*/false);
    if (absl::Status s = resolve(); !s.ok()) {
      mt::comm::PrintMainError(kInfo, s);
      return 1;
    }
    const int tp = config.tensor_model_parallel_size;
    if (tp > 1) return Relaunch(tp, static_cast<int>(original.size()), original.data());
    config = QuickstartDefaults();
  }
  return mt::comm::MpiMain(
      argc, argv, kInfo,
      [&](int world_size) -> absl::Status {
        RETURN_IF_ERROR(resolve());
        const int tp = config.tensor_model_parallel_size;
        if (world_size != tp) {
          return absl::InvalidArgumentError(absl::StrCat(
              "launched with ", world_size, " ranks for --tensor_model_parallel_size=", tp,
              "; run it without mpirun and it launches the ranks itself"));
        }
        return absl::OkStatus();
      },
      [&](const mt::comm::MpiProcess& p) -> absl::StatusOr<int> {
        // A rank that dies or hangs ends the job within --distributed_timeout (default 600 s).
        RETURN_IF_ERROR(Run(config, {p.local_rank, p.local_size}, p.world));
        return 0;
      });
}
