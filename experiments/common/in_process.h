// The main() of an experiment that trains in this process through the library (pretrain.h's
// RunPretrainBert / RunPretrainGpt), with no mpirun: MPI over a world of this one process.
#ifndef MT_EXPERIMENTS_COMMON_IN_PROCESS_H_
#define MT_EXPERIMENTS_COMMON_IN_PROCESS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "core/config_flags.h"
#include "jobs/pretrain/pretrain.h"

namespace mt {
namespace experiments {

// The main() of such an experiment: every MPI program's start-up (comm/mpi_main.h: a world of one
// rank unless launched under mpirun), passing `run` the original argv (for the report's command
// line). An error of a world of one is its one line "<name>: error: <message>" and exit 1; of
// several ranks, it ends every rank.
int InProcessExperimentMain(int argc, char** argv, absl::string_view name, const char* usage,
                            const std::function<absl::Status(int, char**, const jobs::LocalRanks&,
                                                             comm::Communicator&)>& run);

// The settings every such experiment takes as flags, declared once (core/config_flags.h derives
// the flags; each experiment's config extends this struct and sets its own defaults): where to
// write, the batch layout and budget, the learning rate, where to run, where the corpus is kept.
struct InProcessFlags {
  std::string results_dir;
  int64_t seq_length = 64, micro_batch_size = 4, global_batch_size = 4, train_iters = 100;
  double lr = 2e-3;
  DeviceType device = DeviceType::kCpu;
  int threads = 0;
  std::string data_dir;
  std::string tensorboard_dir;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("results_dir", &self.results_dir, "Where to write (default: <workspace>/results/<name>).");
    v("seq_length", &self.seq_length, "Tokens per sample.");
    v("micro_batch_size", &self.micro_batch_size, "Samples per micro-batch.");
    v("global_batch_size", &self.global_batch_size, "Samples per optimizer step.");
    v("train_iters", &self.train_iters, "Optimizer steps of every run (the token budget).");
    v("lr", &self.lr, "Peak learning rate (Adam), the same for every run.");
    v("device", &self.device, "cpu or cuda.", kDeviceTypeNames);
    v("threads", &self.threads, "CPU threads (0: every core).");
    v("data_dir", &self.data_dir,
      "Where the tokenised corpus is kept (default: $MT_DATA_DIR or ~/.cache/megatron-cpp/data).");
    v("tensorboard_dir", &self.tensorboard_dir,
      "Write each run's TensorBoard event files to DIR/<run> (e.g. "
      "results/<name>/tensorboard; empty: none).");
  }
};

// InProcessExperimentMain with the flags of `Config` (an InProcessFlags with the experiment's own
// fields): `defaults` are the flags' defaults, and run(config, argc, argv, local, world) gets them
// with the flags given applied.
template <typename Config, typename Run>
int InProcessExperimentMain(int argc, char** argv, absl::string_view name, const char* usage,
                            const Config& defaults, const Run& run,
                            const char* main_file = __builtin_FILE()) {
  const ConfigFlags<Config> flags(defaults, {}, main_file);  // Registered before parsing.
  return InProcessExperimentMain(
      argc, argv, name, usage,
      [&](int argc, char** argv, const jobs::LocalRanks& local, comm::Communicator& world) {
        const absl::StatusOr<Config> c = flags.WithGiven(defaults);
        return c.ok() ? run(*c, argc, argv, local, world) : c.status();
      });
}

// What changes between an experiment's runs: the model's shape, the seed, the dataset.
struct RunShape {
  int64_t layers = 2, hidden = 64, heads = 4;
  uint64_t seed = 1;
  std::string data_path;
  std::string name;  // The run's TensorBoard subdirectory ("4L-128H").
};

// Sets `config` from the shared flags (the batch layout and budget, the device, the threads) and
// the run's shape (max_position_embeddings = seq_length), with a quiet trainer and the split
// 949,50,1, and TensorBoard event files in <tensorboard_dir>/<shape.name> when the flag is given;
// the rest keep their values.
void ApplyRunShape(const InProcessFlags& flags, const RunShape& shape,
                   jobs::PretrainConfig* config);

// The embedded corpus tokenised for both families (data/preprocessing/default_data.h) under
// `data_dir` (empty: $MT_DATA_DIR or the default), built if missing or out of date; prints a line
// when it builds. Returns the GPT-2 (`gpt2` true) or BERT dataset prefix.
absl::StatusOr<std::string> DefaultDataset(const std::string& data_dir, bool gpt2);

// A fresh empty directory for the runs' logs and checkpoints, <TMPDIR or
// /tmp>/mt_<experiment>_<pid> (removed first if it exists); the caller removes it. Internal naming
// it if it cannot be made.
absl::StatusOr<std::string> ScratchDir(absl::string_view experiment);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_IN_PROCESS_H_
