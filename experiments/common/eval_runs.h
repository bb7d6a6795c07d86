// The experiments' side of the evaluation and pretraining binaries they run as subprocesses
// (//jobs/eval:wikitext103, //jobs/eval:lambada, //jobs/eval:race, //jobs/pretrain:pretrain_*):
// finding them in the runfiles, running them, and reading the results JSON object each prints as
// its last stdout line.
//
//   ASSIGN_OR_RETURN(std::string bin, RunfilePath(argv[0], "jobs/eval/wikitext103"));
//   ASSIGN_OR_RETURN(Json r, RunForJson({}, {bin, "--load=CKPT", "--data=wiki.test.tokens"}));
//   double ppl = r["adjusted_ppl"];
#ifndef MT_EXPERIMENTS_COMMON_EVAL_RUNS_H_
#define MT_EXPERIMENTS_COMMON_EVAL_RUNS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace experiments {

using Json = nlohmann::ordered_json;

// The path of `path` (relative to the workspace root, e.g. "eval/wikitext103") in the runfiles of
// the binary started as `argv0`: under `bazel run`, `bazel test` and from bazel-bin. NotFound
// naming the path (and saying to run the experiment through bazel) when it is not there.
absl::StatusOr<std::string> RunfilePath(const std::string& argv0, const std::string& path);

// The last non-empty line of `out` (trailing whitespace ignored) parsed as a JSON object.
// InvalidArgument naming `program` and quoting the line when there is none or it is not an object.
absl::StatusOr<Json> LastJsonLine(absl::string_view out, absl::string_view program);

// The one launcher command line of the project's own multi-rank runs on this machine (the
// quickstart's relaunch, Table 1's measured steps): mpirun with `np` ranks oversubscribing the
// cores, unbound, over shared memory, yielding while idle, before the program and its arguments.
std::vector<std::string> LocalMpirun(int np);
// Lets mpirun run as root (containers), for LocalMpirun and any --launcher.
void AllowMpirunAsRoot();

// The words of a --launcher flag: "mpirun -np 8" -> {"mpirun", "-np", "8"}; "" -> none.
std::vector<std::string> LauncherWords(absl::string_view launcher);

// Runs `launcher` (e.g. {"mpirun", "-np", "2"}; empty: a plain process) followed by `argv`, and
// returns its standard output. RunCommand's errors (core/subprocess.h).
absl::StatusOr<std::string> RunLaunched(const std::vector<std::string>& launcher,
                                        const std::vector<std::string>& argv);
// RunLaunched, then LastJsonLine of the output.
absl::StatusOr<Json> RunForJson(const std::vector<std::string>& launcher,
                                const std::vector<std::string>& argv);

// How a short pretraining run trains: `iters` steps of `global_batch` sequences of `seq_length`
// tokens (in micro-batches of `micro_batch`; 0: the global batch, no accumulation) at peak `lr`,
// on `device`. An experiment's config holds one for its flags.
struct PretrainSchedule {
  int64_t seq_length = 0, global_batch = 0, micro_batch = 0, iters = 0;
  double lr = 0;
  DeviceType device = DeviceType::kCpu;
  // Hidden and attention dropout; below 0: the binary's default (0.1).
  double dropout = -1;
};

// A short pretraining run of pretrain_gpt or pretrain_bert as the experiments launch one: linear
// warmup over the first tenth of the samples and decay to lr / 10 over all of them, a log line
// every tenth of the run, one validation (2 batches) at the end, the last checkpoint kept in
// `save`; TensorBoard event files in `tensorboard_dir` when it is set; the schedule's dropout
// when it is set.
struct PretrainRun {
  std::string data_path, save;
  int64_t layers = 0, hidden = 0, heads = 0;
  PretrainSchedule schedule;
  std::string tensorboard_dir;
};
// Its flags (without the binary).
std::vector<std::string> PretrainArgs(const PretrainRun& r);

// A comma-separated list without its empty items: "a,,b" -> {"a", "b"}.
std::vector<std::string> CommaList(absl::string_view list);

// `json` at `path` ("splits", "test/high", "accuracy"), as a number. NotFound naming the path and
// `what` when a key is missing or the value is not a number.
absl::StatusOr<double> NumberAt(const Json& json, const std::vector<std::string>& path,
                                absl::string_view what);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_EVAL_RUNS_H_
