#include "experiments/multinode_scaling/dp_model.h"

#include <algorithm>

#include "experiments/common/perf_model.h"

namespace mt {
namespace experiments {

std::vector<int64_t> BucketElements(int64_t parameters, int64_t bucket_elements) {
  std::vector<int64_t> out;
  if (parameters <= 0 || bucket_elements <= 0) return out;
  for (int64_t left = parameters; left > 0; left -= bucket_elements) {
    out.push_back(std::min(left, bucket_elements));
  }
  return out;
}

DpPrediction PredictDpStep(const DpStepInputs& in) {
  DpPrediction p;
  // perf_model's ring all-reduce charges alpha per ring step, 2 (n - 1) of them; the fitted alpha
  // is per call.
  const double step_alpha = in.ranks > 1 ? in.alpha_s / (2.0 * (in.ranks - 1)) : 0;
  const double forward = in.compute_s / 3, backward = 2 * in.compute_s / 3;
  double done = 0, link_free = 0;
  for (int64_t elements : BucketElements(in.parameters, in.bucket_elements)) {
    const double c =
        perf::RingAllReduceSeconds(static_cast<double>(elements) * in.bytes_per_element, in.ranks,
                                   step_alpha, in.bus_bandwidth);
    p.comm_s += c;
    done += static_cast<double>(elements);
    const double final_at = forward + backward * done / static_cast<double>(in.parameters);
    link_free = std::max(final_at, link_free) + c;
  }
  p.after_s = in.compute_s + p.comm_s;
  p.overlapped_s = std::max(in.compute_s, link_free);
  return p;
}

}  // namespace experiments
}  // namespace mt
