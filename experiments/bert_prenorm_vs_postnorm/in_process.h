// The main() of an experiment that trains in this process through the library (pretrain.h's
// RunPretrainBert / RunPretrainGpt), with no mpirun: MPI over a world of this one process.
#ifndef MT_EXPERIMENTS_BERT_PRENORM_VS_POSTNORM_IN_PROCESS_H_
#define MT_EXPERIMENTS_BERT_PRENORM_VS_POSTNORM_IN_PROCESS_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "experiments/pretrain/pretrain.h"

namespace mt {
namespace experiments {

// Starts MPI (a world of one rank unless launched under mpirun), runs `run` on the world, and
// returns main's exit code: 0, or 1 after printing "<name>: error: <status>" (a run over several
// ranks is ended on every rank through MpiRuntime::Abort).
int RunInProcess(int* argc, char*** argv, absl::string_view name,
                 const std::function<absl::Status(const LocalRanks&, comm::Communicator&)>& run);

// "cpu" or "cuda" (the --device flag). InvalidArgument otherwise.
absl::StatusOr<DeviceKind> ParseDevice(absl::string_view text);

// The embedded corpus tokenised for both families (data/preprocessing/default_data.h) under
// `data_dir` (empty: $MT_DATA_DIR or the default), built if missing or out of date; prints a line
// when it builds. Returns the GPT-2 (`gpt2` true) or BERT dataset prefix.
absl::StatusOr<std::string> DefaultDataset(const std::string& data_dir, bool gpt2);

// A fresh empty directory for the runs' logs and checkpoints, <TMPDIR or /tmp>/mt_<experiment>_<pid>
// (removed first if it exists); the caller removes it. Internal naming it if it cannot be made.
absl::StatusOr<std::string> ScratchDir(absl::string_view experiment);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_BERT_PRENORM_VS_POSTNORM_IN_PROCESS_H_
