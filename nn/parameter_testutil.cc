#include "nn/parameter_testutil.h"

#include <vector>

namespace mt {
namespace nn {
namespace testing {

int64_t GlobalIndexOf(const ParamSpec& spec, const Shape& local, int rank, int64_t local_index) {
  const int nd = static_cast<int>(local.size());
  std::vector<int64_t> idx(nd);
  int64_t rest = local_index;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rest % local[d];
    rest /= local[d];
  }
  if (spec.split_dim >= 0) idx[spec.split_dim] += rank * local[spec.split_dim];
  int64_t g = 0;
  for (int d = 0; d < nd; ++d) g = g * spec.global_shape[d] + idx[d];
  return g;
}

}  // namespace testing
}  // namespace nn
}  // namespace mt
