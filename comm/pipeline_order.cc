#include "comm/pipeline_order.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mt {
namespace comm {

namespace {

using Kind = PipelineOp::Kind;

// The k-th forward (or backward) of the interleaved schedule: micro-batches go in groups of P
// through chunk 0, then chunk 1, ...; backwards run the chunks in reverse.
PipelineOp InterleavedOp(Kind kind, int k, int stages, int chunks) {
  const int group = k / (stages * chunks), in_group = k % (stages * chunks);
  const int forward_chunk = in_group / stages;
  const int chunk = kind == Kind::kForward ? forward_chunk : chunks - 1 - forward_chunk;
  return PipelineOp{kind, group * stages + in_group % stages, chunk};
}

}  // namespace

std::string OpName(const PipelineOp& op) {
  const std::string base = absl::StrCat(op.kind == Kind::kForward ? "F" : "B", op.micro);
  return op.chunk == 0 ? base : absl::StrCat(base, ".", op.chunk);
}

absl::Status CheckPipelineSchedule(int stages, int stage, int chunks, int micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || chunks < 1 || micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline schedule: need stages >= 1 (got ", stages, "), a stage in [0, ",
                     stages, ") (got ", stage, "), chunks >= 1 (got ", chunks,
                     ") and micro-batches >= 1 (got ", micro_batches, ")"));
  }
  if (chunks > 1 && (stages < 2 || micro_batches % stages != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline schedule: the interleaved schedule (", chunks,
        " virtual stages per stage) needs --pipeline_model_parallel_size >= 2 (got ", stages,
        ") and a number of micro-batches per iteration (global_batch_size / (micro_batch_size x "
        "data-parallel size) = ",
        micro_batches, ") that is a multiple of it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PipelineOp>> PipelineScheduleOps(int stages, int stage, int chunks,
                                                            int micro_batches) {
  RETURN_IF_ERROR(CheckPipelineSchedule(stages, stage, chunks, micro_batches));
  const int total = micro_batches * chunks;
  int warmup = std::min((stages - stage - 1) * (chunks > 1 ? 2 : 1) + (chunks - 1) * stages, total);
  if (chunks > 1 && micro_batches == stages) warmup = total;  // Megatron: all forwards first.
  auto op = [&](Kind kind, int k) {
    return chunks == 1 ? PipelineOp{kind, k, 0} : InterleavedOp(kind, k, stages, chunks);
  };
  std::vector<PipelineOp> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(op(Kind::kForward, k));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(op(Kind::kForward, warmup + k));
    ops.push_back(op(Kind::kBackward, k));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(op(Kind::kBackward, k));
  return ops;
}

int64_t PipelineInFlight::chunk_peak_sum() const {
  int64_t sum = 0;
  for (int64_t p : chunk_peaks) sum += p;
  return sum;
}

absl::StatusOr<PipelineInFlight> PipelineInFlightMicroBatches(int stages, int stage, int chunks,
                                                              int micro_batches) {
  if (micro_batches == 0) {  // The larger of m = P and m = 2P, count by count.
    ASSIGN_OR_RETURN(PipelineInFlight most,
                     PipelineInFlightMicroBatches(stages, stage, chunks, std::max(stages, 1)));
    ASSIGN_OR_RETURN(const PipelineInFlight twice,
                     PipelineInFlightMicroBatches(stages, stage, chunks, 2 * std::max(stages, 1)));
    most.peak = std::max(most.peak, twice.peak);
    for (int v = 0; v < chunks; ++v) {
      most.chunk_peaks[v] = std::max(most.chunk_peaks[v], twice.chunk_peaks[v]);
    }
    return most;
  }
  ASSIGN_OR_RETURN(const std::vector<PipelineOp> ops,
                   PipelineScheduleOps(stages, stage, chunks, micro_batches));
  PipelineInFlight in_flight;
  in_flight.chunk_peaks.assign(chunks, 0);
  std::vector<int64_t> now(chunks, 0);
  int64_t total = 0;
  for (const PipelineOp& op : ops) {
    const int64_t step = op.kind == Kind::kForward ? 1 : -1;
    now[op.chunk] += step;
    total += step;
    in_flight.chunk_peaks[op.chunk] = std::max(in_flight.chunk_peaks[op.chunk], now[op.chunk]);
    in_flight.peak = std::max(in_flight.peak, total);
  }
  return in_flight;
}

}  // namespace comm
}  // namespace mt
