// The README's main job:  ./bazelw run //experiments/quickstart
//
// On the embedded default corpus (the Debian fortunes text), tokenised into a GPT-2 indexed
// dataset if needed, trains a small GPT-2 with tensor parallelism over MPI ranks (it relaunches
// itself under mpirun), reports the falling loss and the validation perplexity against the unigram
// baseline, saves a checkpoint, and prints a generated sample.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_communicator.h"
#include "core/status.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/indexed/indexed_dataset.h"
#include "data/preprocessing/default_data.h"
#include "experiments/pretrain/pretrain_gpt.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

DEFINE_int32(tensor_model_parallel_size, 2, "Tensor-parallel degree = MPI ranks launched.");
DEFINE_int32(train_iters, 200, "Optimizer steps.");
DEFINE_int32(num_layers, 4, "Transformer layers.");
DEFINE_int32(hidden_size, 128, "Hidden size.");
DEFINE_int32(num_attention_heads, 4, "Attention heads.");
DEFINE_int32(seq_length, 128, "Tokens per sample.");
DEFINE_int32(micro_batch_size, 4, "Samples per micro-batch.");
DEFINE_int32(global_batch_size, 8, "Samples per step.");
DEFINE_double(lr, 3e-3, "Peak learning rate.");
DEFINE_int32(threads, 0, "CPU threads per rank (0: cores / ranks).");
DEFINE_string(save, "", "Checkpoint directory (default: next to the data, quickstart_checkpoints).");
DEFINE_string(prompt, "The best way to", "Prompt of the generated sample.");

namespace {

// Relaunches this binary under mpirun with `np` ranks, forwarding the arguments.
int Relaunch(int np, int argc, char** argv) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "quickstart: error: cannot find this binary's path to relaunch it\n");
    return 1;
  }
  self[n] = '\0';
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  std::vector<std::string> args = {"mpirun", "--oversubscribe", "--bind-to", "none", "--mca",
                                   "btl", "self,vader", "--mca", "mpi_yield_when_idle", "1",
                                   "-np", std::to_string(np), self};
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

absl::Status Run(mt::comm::Communicator& world) {
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

  mt::experiments::PretrainGptConfig c;
  mt::models::ModelConfig& m = c.model;
  m.num_layers = FLAGS_num_layers;
  m.hidden_size = FLAGS_hidden_size;
  m.num_attention_heads = FLAGS_num_attention_heads;
  m.vocab_size = 50257;
  m.max_position_embeddings = FLAGS_seq_length;
  m.hidden_dropout = 0.1f;
  m.attention_dropout = 0.1f;
  mt::train::TrainerConfig& t = c.trainer;
  t.micro_batch_size = FLAGS_micro_batch_size;
  t.global_batch_size = FLAGS_global_batch_size;
  t.seq_length = FLAGS_seq_length;
  t.train_iters = FLAGS_train_iters;
  t.log_interval = std::max(1, FLAGS_train_iters / 12);
  t.eval_iters = 8;
  t.seed = 1234;
  c.lr.max_lr = FLAGS_lr;
  c.lr.min_lr = FLAGS_lr / 10;
  c.lr.warmup_samples = static_cast<int64_t>(FLAGS_train_iters) * FLAGS_global_batch_size / 10;
  c.lr.decay_samples = static_cast<int64_t>(FLAGS_train_iters) * FLAGS_global_batch_size;
  c.lr.style = mt::train::DecayStyle::kCosine;
  c.weight_decay = 0.01;
  c.clip_grad = 1.0;
  c.tensor_model_parallel_size = FLAGS_tensor_model_parallel_size;
  c.data_path = data.gpt2_prefix;
  c.split = "949,50,1";
  c.save = FLAGS_save.empty() ? mt::data::DefaultDataDir() + "/quickstart_checkpoints" : FLAGS_save;
  c.keep_last = 1;
  c.threads = FLAGS_threads;
  c.eval_interval = std::max(1, FLAGS_train_iters / 3);
  c.generate_prompt = FLAGS_prompt;
  c.generate_tokens = 40;

  double baseline = 0;
  if (world.rank() == 0) {
    ASSIGN_OR_RETURN(baseline, UnigramBaseline(data.gpt2_prefix, c.split, m.vocab_size));
    std::printf("quickstart: unigram baseline on the validation documents: %.4f nats/token "
                "(perplexity %.1f)\n",
                baseline, std::exp(baseline));
  }
  ASSIGN_OR_RETURN(mt::experiments::PretrainResult r, mt::experiments::RunPretrainGpt(c, world, nullptr));
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
  gflags::SetUsageMessage("Trains a small tensor-parallel GPT-2 on the embedded corpus.");
  FLAGS_minloglevel = 1;  // Library INFO logs (dataset index caching) only with --minloglevel=0.
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/false);
  const int tp = FLAGS_tensor_model_parallel_size;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && tp > 1) return Relaunch(tp, argc, argv);
  auto runtime = mt::comm::MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) {
    std::fprintf(stderr, "quickstart: error: %s\n", std::string(runtime.status().message()).c_str());
    return 1;
  }
  auto world = (*runtime)->World();
  if (!world.ok()) mt::comm::MpiRuntime::Abort(world.status());
  if ((*world)->size() != tp) {
    if ((*world)->rank() == 0) {
      std::fprintf(stderr, "quickstart: error: launched with %d ranks for "
                   "--tensor_model_parallel_size=%d; run it without mpirun and it launches the "
                   "ranks itself\n", (*world)->size(), tp);
    }
    return 1;
  }
  absl::Status s = Run(**world);
  if (!s.ok()) mt::comm::MpiRuntime::Abort(s);
  return 0;
}
