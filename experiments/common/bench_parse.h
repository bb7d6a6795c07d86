// What the experiments read from the benchmarks' output (comm/comm_bench, train_step_bench), and
// the all-reduce's latency and bandwidth fitted to comm_bench's rows: the inputs of a prediction
// by perf_model.h.
#ifndef MT_EXPERIMENTS_COMMON_BENCH_PARSE_H_
#define MT_EXPERIMENTS_COMMON_BENCH_PARSE_H_

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace experiments {

// The numbers printed after `prefix` on the first line of `text` containing it, e.g.
// NumberAfter(out, "step time (median of", ": ") for "step time (median of 3): 0.12 s".
absl::StatusOr<double> NumberAfter(absl::string_view text, absl::string_view line_prefix,
                                   absl::string_view marker);
// comm_bench's rows of one all-reduce section, "all_reduce" (blocking) or "all_reduce_async"
// (non-blocking, waited for at once): (bytes, seconds).
std::vector<std::pair<double, double>> ParseAllReduceRows(absl::string_view comm_bench_output,
                                                          absl::string_view section = "all_reduce");
// (alpha, bus bandwidth) of time = alpha + 2 (n - 1) / n * bytes / bandwidth: alpha is the fastest
// time of any row, normally the smallest message's (a latency cannot be negative, and an
// unconstrained least-squares intercept dominated by the large sizes is; a slowed smallest
// message must not lift it above the others), then 1 / bandwidth is the least-squares slope of
// time - alpha through the origin over the rows. InvalidArgument for no rows, a non-positive size,
// ranks < 2, or times that do not grow with the size.
absl::StatusOr<std::pair<double, double>> FitAllReduce(
    const std::vector<std::pair<double, double>>& rows, int ranks);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_BENCH_PARSE_H_
