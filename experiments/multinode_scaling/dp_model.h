// The data-parallel step across a link, predicted before it is measured: one rank's compute
// (measured on this machine), plus the gradient all-reduce of each DP bucket at the latency and
// bandwidth fitted to comm_bench's all-reduce over that link (the Table 1 performance model's ring
// all-reduce, experiments/common/perf_model.h), either after backward or overlapped with it.
#ifndef MT_EXPERIMENTS_MULTINODE_SCALING_DP_MODEL_H_
#define MT_EXPERIMENTS_MULTINODE_SCALING_DP_MODEL_H_

#include <cstdint>
#include <vector>

namespace mt {
namespace experiments {

struct DpStepInputs {
  double compute_s = 0;    // One rank's step without communication (forward, backward, Adam).
  int64_t parameters = 0;  // Gradient elements all-reduced per step.
  int64_t bucket_elements = 1 << 20;
  int bytes_per_element = 4;  // f32 gradients.
  int ranks = 2;              // Data-parallel ranks.
  double alpha_s = 0;  // Fitted: one all-reduce call = alpha + 2(n-1)/n bytes / bus_bandwidth.
  double bus_bandwidth = 0;  // Bytes/s.
};

struct DpPrediction {
  double comm_s = 0;        // Every bucket's all-reduce, one after another.
  double after_s = 0;       // compute + comm: the all-reduces after backward.
  double overlapped_s = 0;  // Buckets all-reduced as backward finalises them (see PredictDpStep).
};

// The buckets' sizes in the order the reducer fills them: full buckets, the remainder last.
std::vector<int64_t> BucketElements(int64_t parameters, int64_t bucket_elements);

// after_s = compute + the buckets' all-reduces. overlapped_s: forward takes a third of the
// compute and backward two thirds (backward's FLOPs are twice forward's); bucket i is final when
// backward has produced the gradients up to its end (uniformly over backward, so the last one at
// its end), and the link takes one all-reduce at a time (a bucket starts when it is final and the
// previous one is done); the step ends when both backward and the last all-reduce have.
DpPrediction PredictDpStep(const DpStepInputs& in);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_MULTINODE_SCALING_DP_MODEL_H_
