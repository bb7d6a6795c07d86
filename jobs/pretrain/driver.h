// The main() of a pretraining binary (pretrain_gpt, pretrain_bert): logging, MPI, the flags
// (derived from the config's field table, core/config_flags.h), their Megatron
// rules, validation with a one-line error, SIGTERM, and the run.
//
//   int main(int argc, char** argv) {
//     PretrainGptConfig config;                                          // The defaults.
//     ConfigFlags<PretrainGptConfig> flags(config, kNotFlags);
//     return PretrainMain(argc, argv, {"pretrain_gpt", "GPT pretraining ..."}, &config,
//                         [&] { return flags.ApplyGiven(&config); },
//                         [&](const LocalRanks& l, comm::Communicator& w,
//                             const std::atomic<bool>* stop) {
//                           return RunPretrainGpt(config, l, w, stop); });
//   }
#ifndef MT_JOBS_PRETRAIN_DRIVER_H_
#define MT_JOBS_PRETRAIN_DRIVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/mpi_main.h"
#include "jobs/pretrain/pretrain.h"

namespace mt {
namespace jobs {

// Config fields a driver does not expose as flags: the family is the binary's, and the compute
// dtype is spelled Megatron's way (--fp16, --bf16, --fp32).
inline const std::set<std::string> kNotFlags = {"family", "compute_dtype"};

// Runs a pretraining binary. `config` holds the defaults (of the binary's family) and receives
// the resolved settings: `apply_flags` sets every field whose flag was given (ConfigFlags::
// ApplyGiven). The rules on top, as Megatron-LM's flags behave:
//   --model=NAME     start from the registered model's config (it must be of config's family);
//                    the model flags given override it;
//   no --model       the model comes from the flags, and max_position_embeddings defaults to
//                    seq_length;
//   --fp16/--bf16/--fp32   the compute dtype (exclusive; default f32 on the CPU, bf16 on CUDA);
//   --lr_decay_samples=0   decay until train_iters x global_batch_size.
// The start-up is every MPI program's (comm/mpi_main.h: bad flags print one line on rank 0 and
// return 1 on every rank before any collective; a failed run ends every rank through
// MpiRuntime::Abort; --distributed_timeout), with SIGTERM as the stop signal: every rank stops
// after the same iteration, saves (with --save) and exits 0. Returns main's exit code.
int PretrainMain(int argc, char** argv, const comm::MainInfo& info, PretrainConfig* config,
                 const std::function<absl::Status()>& apply_flags,
                 const std::function<absl::StatusOr<PretrainResult>(
                     const LocalRanks&, comm::Communicator&, const std::atomic<bool>*)>& run);

// The flag rules above, without MPI (PretrainMain calls it after parsing); for tests.
absl::Status ResolveFlags(PretrainConfig* config, const std::function<absl::Status()>& apply_flags);

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_PRETRAIN_DRIVER_H_
