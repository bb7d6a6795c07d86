// Test helper for tensor-parallel parameters: where a rank's local element sits in the global
// tensor. testonly.
#ifndef MT_NN_PARAMETER_TESTUTIL_H_
#define MT_NN_PARAMETER_TESTUTIL_H_

#include <cstdint>

#include "core/tensor.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {
namespace testing {

// Row-major global index of local element `local_index` of rank `rank`'s slice of `spec` (local
// shape `local`), computed by unravelling the local multi-index (independently of parameter.cc's
// arithmetic).
int64_t GlobalIndexOf(const ParamSpec& spec, const Shape& local, int rank, int64_t local_index);

}  // namespace testing
}  // namespace nn
}  // namespace mt

#endif  // MT_NN_PARAMETER_TESTUTIL_H_
