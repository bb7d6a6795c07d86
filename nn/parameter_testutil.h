// Test helpers for tensor-parallel parameters: where a rank's local element sits in the global
// tensor, TP-invariant values, and gradient slices against a serial store. testonly.
#ifndef MT_NN_PARAMETER_TESTUTIL_H_
#define MT_NN_PARAMETER_TESTUTIL_H_

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {
namespace testing {

// Row-major global index of local element `local_index` of rank `rank`'s slice of `spec` (local
// shape `local`), computed by unravelling the local multi-index (independently of parameter.cc's
// arithmetic).
int64_t GlobalIndexOf(const ParamSpec& spec, const Shape& local, int rank, int64_t local_index);

// Sets every parameter of an allocated CPU store to a deterministic function of (name, global
// index), so that stores of any TP degree hold the same global values, with non-zero biases and
// norm gains away from 1.
void FillGlobal(ParameterStore* store);

// EXPECTs every local gradient of `sharded` to equal the corresponding slice of `serial`'s within
// `tol` times the largest magnitude of the serial gradient (CPU stores); names `what`.
void ExpectGradientSlicesMatch(const ParameterStore& serial, const ParameterStore& sharded,
                               double tol, const std::string& what);

}  // namespace testing
}  // namespace nn
}  // namespace mt

#endif  // MT_NN_PARAMETER_TESTUTIL_H_
