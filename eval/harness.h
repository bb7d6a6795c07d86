// What every evaluation binary (//jobs/eval:wikitext103, //jobs/eval:lambada, //jobs/eval:race)
// shares: its common settings, the process it runs in (device, tensor-parallel layout, the model
// loaded from a checkpoint), and rank 0's outputs (progress lines, per-example JSON lines, the
// results JSON). A task (EvalTask) supplies the data and the scoring (or, for RACE, fine-tuning);
// harness_main.h runs both.
//
// Layout: every rank of the job is one tensor-parallel rank of a single TP group (TP = world
// size, which must divide the heads; any degree, whatever the checkpoint was saved with:
// checkpoint/model_loading.h reshards in memory). Every rank runs the same forward passes; rank 0
// scores and writes.
//
// Stages, so that input errors end every rank with one line and before any collective:
//   1. Harness::Open (local): the device, the checkpoint's model config, the thread pool;
//   2. EvalTask::Prepare (local): the task checks the model and reads its data;
//   3. Harness::LoadModel (local): the model the task asks for (EvalTask::LoadOptions), its
//      parameters at this rank's slice; then EvalTask::Loaded (local) checks what was loaded and
//      sets up the task's per-rank state;
//   4. AgreeOnStatus (one all-reduce over the world): every rank learns whether any failed;
//   5. Harness::Connect (collective): the communicators;
//   6. EvalTask::Run (collective): scoring; the results object.
#ifndef MT_EVAL_HARNESS_H_
#define MT_EVAL_HARNESS_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_loading.h"
#include "comm/communicator.h"
#include "comm/parallel_context.h"
#include "comm/world_communicator.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/precision.h"
#include "core/rank_execution.h"
#include "core/thread_pool.h"
#include "models/model.h"
#include "nlohmann/json.hpp"
#include "nn/context.h"

namespace mt {
namespace eval {

// JSON objects keep their keys in insertion order (results print as the tasks list them).
using Json = nlohmann::ordered_json;

// The settings every harness has (the binaries' flags: core/config_flags.h).
struct HarnessConfig {
  std::string load;               // Checkpoint directory.
  int64_t iteration = -1;         // Checkpoint iteration; -1: the latest.
  int micro_batch_size = 4;       // Sequences (RACE: questions) per forward pass.
  std::string results_json;       // Also write the results object here.
  std::string per_example_jsonl;  // One JSON line per window / example.
  std::string vocab_file;         // GPT-2 encoder.json or BERT vocab.txt (empty: the installed).
  std::string merge_file;         // GPT-2 vocab.bpe (empty: the installed one).
  DeviceType device = DeviceType::kCpu;
  comm::CommBackend comm_backend = comm::CommBackend::kAuto;
  PrecisionFlags precision;       // --fp16 / --bf16 / --fp32, as every binary takes them.
  int threads = 0;                // CPU threads per rank (0: cores / ranks on this host).
  double progress_interval = 30;  // Seconds between progress lines (0: after every batch).
  checkpoint::CheckpointVerify checkpoint_verify = checkpoint::CheckpointVerify::kCrc32c;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("load", &self.load, "Checkpoint directory (its model config builds the model).");
    v("iteration", &self.iteration, "Checkpoint iteration to load (-1: the latest).");
    v("micro_batch_size", &self.micro_batch_size,
      "Sequences per forward pass (their full logits take micro_batch_size x seq_length x "
      "padded vocabulary x 4 bytes, twice); RACE: questions (4 sequences each).");
    v("results_json", &self.results_json, "Also write the results JSON object to this file.");
    v("per_example_jsonl", &self.per_example_jsonl,
      "Write one JSON line per scored window / example to this file.");
    v("vocab_file", &self.vocab_file,
      "GPT-2 encoder.json, or for RACE a BERT WordPiece vocab.txt (default: the installed one).");
    v("merge_file", &self.merge_file, "GPT-2 vocab.bpe merges (default: the installed one).");
    v("device", &self.device, "cpu, or cuda (each rank on GPU local_rank mod GPUs).",
      kDeviceTypeNames);
    v("comm_backend", &self.comm_backend,
      "With --device=cuda: nccl, mpi (staged through host memory; ranks may share a GPU) or "
      "auto (nccl when each local rank has its own GPU).",
      comm::kCommBackendNames);
    PrecisionFlags::Fields(self.precision, v);
    v("threads", &self.threads, "CPU threads per rank (0: cores / ranks on this host).");
    v("progress_interval", &self.progress_interval,
      "Seconds between progress lines (0: after every micro-batch).");
    v("checkpoint_verify", &self.checkpoint_verify, checkpoint::kCheckpointVerifyHelp,
      checkpoint::kCheckpointVerifyNames);
  }

  // InvalidArgument naming the flag: no --load, micro_batch_size < 1, more than one precision
  // flag, --comm_backend=nccl off CUDA, only one of --vocab_file / --merge_file, negative
  // threads or progress_interval.
  absl::Status Validate() const;
};

// Where this process runs, as the MPI runtime says.
struct Placement {
  int rank = 0;        // In the world.
  int world_size = 1;  // = the TP degree.
  int local_rank = 0;  // Among the processes on this host (picks the GPU).
  int local_size = 1;
};

class Harness {
 public:
  // Stage 1 (local): this rank's device (GPU local_rank mod count, with its context and memory
  // pool) and thread pool, and the checkpoint's model config. FailedPrecondition without a GPU
  // for --device=cuda, or when the model cannot be split over the world size (naming the heads
  // or FFN width it must divide); the errors of checkpoint::ReadCheckpointModel.
  static absl::StatusOr<std::unique_ptr<Harness>> Open(const HarnessConfig& config,
                                                       const Placement& placement);
  ~Harness();

  // Stage 3 (local): the model from the checkpoint at this rank's slice (checkpoint::LoadModel with
  // `options`, whose iteration and compute dtype the harness sets: the checkpoint's and
  // compute_dtype()).
  absl::Status LoadModel(checkpoint::LoadModelOptions options = {});
  // Stage 5 (collective over `world`, which must outlive this object): the communicators
  // (comm::CreateWorldCommunicator: NCCL or MPI as --comm_backend says) and the layout.
  absl::Status Connect(comm::Communicator& world);

  const HarnessConfig& config() const { return config_; }
  DType compute_dtype() const { return compute_dtype_; }  // --fp16 / --bf16 / --fp32, resolved.
  const Placement& placement() const { return placement_; }
  bool rank0() const { return placement_.rank == 0; }
  const checkpoint::CheckpointModel& checkpoint() const { return checkpoint_; }
  // After LoadModel: the model, the store holding its parameters, and what the load did.
  models::Model& model() { return *loaded_.model; }
  nn::ParameterStore& store() { return *loaded_.store; }
  const checkpoint::ParameterLoad& parameter_load() const { return loaded_.load; }
  const ExecContext& exec() const { return rank_.exec; }
  ThreadPool* pool() { return rank_.pool.get(); }
  // After Connect: the layout (one TP group over the world), and eval mode on the TP group.
  comm::ParallelContext& parallel() { return *parallel_; }
  nn::StepContext step_context() const;
  // "gpt2-345m (gpt2: 24 layers, hidden 1024, 16 heads, vocab 50257) from DIR iteration N
  // (saved at TP 2), run at TP 1 on cpu in f32".
  std::string Describe() const;

 private:
  Harness() = default;

  HarnessConfig config_;
  Placement placement_;
  DType compute_dtype_ = DType::kF32;
  checkpoint::CheckpointModel checkpoint_;
  // Destroyed in reverse order: the model and communicators before the device's pool and context.
  RankExecution rank_;
  comm::WorldCommunicator world_;
  std::unique_ptr<comm::ParallelContext> parallel_;
  checkpoint::LoadedModel loaded_;
};

// A task run by the harness: its data and its scoring.
class EvalTask {
 public:
  virtual ~EvalTask() = default;
  // Stage 2 (local, on every rank): checks that the checkpoint's model fits the task and reads,
  // tokenises and lays out the data; rank 0 also opens its output files. Errors are one line
  // naming the file (and line), or the model and what the task needs.
  virtual absl::Status Prepare(const checkpoint::CheckpointModel& checkpoint, bool rank0) = 0;
  // Stage 3: what to build and load (heads, which parameters may be missing from the checkpoint
  // or not used, the initial values of missing ones). Default: the checkpoint's model as it was
  // saved, every parameter present and used.
  virtual checkpoint::LoadModelOptions LoadOptions() const { return {}; }
  // Stage 3, after the load (local, on every rank): checks what was loaded
  // (harness.parameter_load()) and sets up per-rank state (an optimizer's moments, say). Errors
  // are one line, as Prepare's.
  virtual absl::Status Loaded(Harness& harness) { return absl::OkStatus(); }
  // Stage 6 (collective over the TP group): scores everything; returns the results object
  // (complete on rank 0).
  virtual absl::StatusOr<Json> Run(Harness& harness) = 0;
};

// Stage 4 (one all-reduce over `world`): OK when every rank's `local` is OK; else this rank's
// error, or Aborted when only other ranks failed. *report says whether this rank prints its
// error: rank 0 when it failed (the others failing alike stay quiet: one line per job), else
// every rank that failed. An all-reduce failure is returned with *report set.
absl::Status AgreeOnStatus(comm::Communicator& world, const absl::Status& local, bool* report);

// A file of JSON lines (rank 0's per-example output). Errors name the path.
class JsonlWriter {
 public:
  // Truncates or creates `path`. Errors: errno-derived, naming the path.
  static absl::StatusOr<std::unique_ptr<JsonlWriter>> Open(const std::string& path);
  ~JsonlWriter();
  absl::Status Write(const Json& line);
  // Flushes and closes; the error of any earlier write or of closing, naming the path.
  absl::Status Close();

 private:
  JsonlWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

// The results object written to `path` (one line of JSON and a newline). Errors name the path.
absl::Status WriteResultsJson(const std::string& path, const Json& results);

// Rank 0's progress lines, at most one per `interval_s` (and none at all for runs shorter than
// it, unless 0):
//   "wikitext103: 1200/8700 windows (13.8%), 4512 targets/s, elapsed 0:01:05, ETA 0:06:51"
// (`rate_unit` names what the rate counts: "targets" there).
class ProgressMeter {
 public:
  ProgressMeter(std::string task, std::string unit, int64_t total, double interval_s, bool enabled,
                std::string rate_unit = "targets");
  // `done` of total units finished, `scored` rate units (targets) so far.
  void Update(int64_t done, int64_t scored);
  double elapsed_s() const;

 private:
  std::string task_, unit_, rate_unit_;
  int64_t total_;
  double interval_s_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_HARNESS_H_
