// Context parallelism in the pretraining job (--context_parallel_size, docs/context_parallel.md):
// the flags' checks, made on rank 0 before any collective.
#ifndef MT_JOBS_PRETRAIN_CONTEXT_PARALLEL_FLAGS_H_
#define MT_JOBS_PRETRAIN_CONTEXT_PARALLEL_FLAGS_H_

#include "absl/status/status.h"
#include "jobs/pretrain/pretrain.h"

namespace mt {
namespace jobs {

// InvalidArgument (one line naming the flag) for a CP size < 1, a --seq_length that does not split
// into 2 x CP chunks (of a multiple of TP positions with --sequence_parallel), and with CP > 1 for
// what it does not run with: expert parallelism, sequence parallelism, BERT, a GPU, attention
// dropout.
absl::Status ValidateContextParallel(const PretrainConfig& c);

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_PRETRAIN_CONTEXT_PARALLEL_FLAGS_H_
