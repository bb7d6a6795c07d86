#include "nn/parameter_testutil.h"

#include <cmath>
#include <vector>

#include "core/ops/testutil.h"
#include "gtest/gtest.h"

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

void FillGlobal(ParameterStore* store) {
  for (int i = 0; i < store->size(); ++i) {
    const ParamSpec& spec = store->spec(i);
    const double phase = static_cast<double>(NameHash(spec.name) % 1000) * 1e-3;
    const TensorView v = store->value(i);
    for (int64_t j = 0; j < v.numel(); ++j) {
      const int64_t g = GlobalIndexOf(spec, v.shape, store->tp_rank(), j);
      const double x = 0.5 * std::sin(0.731 * static_cast<double>(g) + 6.283 * phase);
      v.data_as<float>()[j] = static_cast<float>(spec.init == Init::kOnes ? 1.0 + x : x);
    }
  }
}

void ExpectGradientSlicesMatch(const ParameterStore& serial, const ParameterStore& sharded,
                               double tol, const std::string& what) {
  ASSERT_EQ(serial.size(), sharded.size()) << what;
  for (int i = 0; i < sharded.size(); ++i) {
    const ParamSpec& spec = sharded.spec(i);
    auto si = serial.Find(spec.name);
    ASSERT_TRUE(si.ok()) << si.status();
    const std::vector<double> full = ::mt::testing::ToDoubles(serial.grad(*si));
    const TensorView local = sharded.grad(i);
    std::vector<double> expected(local.numel());
    for (int64_t j = 0; j < local.numel(); ++j) {
      expected[j] = full[GlobalIndexOf(spec, local.shape, sharded.tp_rank(), j)];
    }
    const std::vector<double> bound(expected.size(), tol * ::mt::testing::MaxAbs(full));
    EXPECT_TRUE(::mt::testing::WithinBounds(::mt::testing::ToDoubles(local), expected, bound))
        << what << " gradient of " << spec.name;
  }
}

}  // namespace testing
}  // namespace nn
}  // namespace mt
