// Tests of parameter partition metadata, sharded initialisation and the parameter store:
// LocalShape's divisibility errors; a TP-sharded initialisation holds exactly the slices of the
// serial (TP = 1) one for every split dimension; the normal initialisation has the requested mean
// and standard deviation; the store lays values and gradients out in one flat buffer each.
#include "nn/parameter.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "nn/parameter_testutil.h"

namespace mt {
namespace nn {
namespace {

using ::mt::testing::ToDoubles;
using testing::GlobalIndexOf;

ParamSpec Spec(const std::string& name, Shape shape, int split_dim, Init init = Init::kNormal,
               double init_std = 0.02) {
  ParamSpec s;
  s.name = name;
  s.global_shape = std::move(shape);
  s.split_dim = split_dim;
  s.init = init;
  s.init_std = init_std;
  return s;
}

// The serial model's values of `spec` (TP = 1).
std::vector<float> FullValues(const ParamSpec& spec, uint64_t seed) {
  Tensor t = Tensor::Host(spec.global_shape, DType::kF32);
  absl::Status s = InitializeSlice(spec, /*tp_rank=*/0, /*tp_size=*/1, seed, t.view());
  EXPECT_TRUE(s.ok()) << s;
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
}

TEST(LocalShapeTest, SplitsTheSplitDimensionOnly) {
  ParamSpec s = Spec("w", {6, 8}, 0);
  auto l = LocalShape(s, 2);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*l, (Shape{3, 8}));
  l = LocalShape(s, 1);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (Shape{6, 8}));
  s.split_dim = 1;
  l = LocalShape(s, 4);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (Shape{6, 2}));
  s.split_dim = -1;  // Replicated: any TP size, even one that divides nothing.
  l = LocalShape(s, 5);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (Shape{6, 8}));
}

TEST(LocalShapeTest, RejectsIndivisibleSplitsAndBadDims) {
  ParamSpec s = Spec("layers.0.qkv.weight", {6, 8}, 0);
  auto l = LocalShape(s, 4);  // 6 % 4 != 0.
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("layers.0.qkv.weight"), std::string::npos) << l.status();
  EXPECT_NE(l.status().message().find("not divisible"), std::string::npos) << l.status();
  s.split_dim = 1;
  EXPECT_EQ(LocalShape(s, 3).status().code(), absl::StatusCode::kInvalidArgument);  // 8 % 3.
  EXPECT_EQ(LocalShape(s, 0).status().code(), absl::StatusCode::kInvalidArgument);
  s.split_dim = 2;  // Out of range for a 2-D shape.
  l = LocalShape(s, 1);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("out of range"), std::string::npos) << l.status();
}

struct SliceCase {
  Shape shape;
  int split_dim;
};

class InitializeSliceTest : public ::testing::TestWithParam<SliceCase> {};

TEST_P(InitializeSliceTest, ShardsAreExactSlicesOfTheSerialInitialisation) {
  const SliceCase& c = GetParam();
  const ParamSpec spec = Spec("layers.1.mlp.fc1.weight", c.shape, c.split_dim, Init::kNormal, 0.3);
  const uint64_t seed = 1234;
  const std::vector<float> full = FullValues(spec, seed);
  // Not trivially zero / constant.
  double sum_abs = 0;
  for (float v : full) sum_abs += std::fabs(v);
  EXPECT_GT(sum_abs / full.size(), 0.1);
  for (int tp : {2, 4}) {
    std::vector<int> covered(full.size(), 0);
    for (int r = 0; r < tp; ++r) {
      auto local = LocalShape(spec, tp);
      ASSERT_TRUE(local.ok()) << local.status();
      Tensor t = Tensor::Host(*local, DType::kF32);
      ASSERT_TRUE(InitializeSlice(spec, r, tp, seed, t.view()).ok());
      int mismatches = 0;
      for (int64_t j = 0; j < t.numel(); ++j) {
        const int64_t g = GlobalIndexOf(spec, *local, r, j);
        ASSERT_LT(g, static_cast<int64_t>(full.size()));
        ++covered[g];
        // Bitwise equality: the value is a function of the global index only.
        if (std::memcmp(&t.data_as<float>()[j], &full[g], sizeof(float)) != 0) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0) << "tp=" << tp << " rank=" << r << " split_dim=" << c.split_dim;
    }
    // Split: the ranks' slices tile the global tensor exactly once; replicated: each rank has all.
    const int expected = c.split_dim < 0 ? tp : 1;
    for (size_t g = 0; g < covered.size(); ++g) {
      ASSERT_EQ(covered[g], expected) << "global element " << g << " tp=" << tp;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, InitializeSliceTest,
                         ::testing::Values(SliceCase{{8, 12}, -1}, SliceCase{{8, 12}, 0},
                                           SliceCase{{8, 12}, 1}, SliceCase{{4, 8, 12}, -1},
                                           SliceCase{{4, 8, 12}, 0}, SliceCase{{4, 8, 12}, 1},
                                           SliceCase{{4, 8, 12}, 2}, SliceCase{{20}, 0}));

TEST(InitializeSliceTest, NormalValuesHaveTheRequestedMeanAndStd) {
  for (double init_std : {0.02, 1.0}) {
    const ParamSpec spec = Spec("embedding.word.weight", {400, 500}, 0, Init::kNormal, init_std);
    const std::vector<float> v = FullValues(spec, 77);
    const double n = static_cast<double>(v.size());
    double sum = 0, sum_sq = 0, sum_q = 0, lag = 0;
    int64_t within_one = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const double z = v[i] / init_std;
      sum += z;
      sum_sq += z * z;
      sum_q += z * z * z * z;
      if (std::fabs(z) < 1.0) ++within_one;
      if (i > 0) lag += z * (v[i - 1] / init_std);
    }
    const double mean = sum / n;
    const double std = std::sqrt(sum_sq / n - mean * mean);
    // Six standard errors of each statistic of n independent standard normals.
    EXPECT_LT(std::fabs(mean), 6 / std::sqrt(n)) << init_std;
    EXPECT_LT(std::fabs(std - 1), 6 / std::sqrt(2 * n)) << init_std;  // SE of s is ~1/sqrt(2n).
    const double p1 = 0.682689492137086;                              // P(|z| < 1).
    EXPECT_LT(std::fabs(within_one / n - p1), 6 * std::sqrt(p1 * (1 - p1) / n)) << init_std;
    EXPECT_LT(std::fabs(sum_q / n - 3), 6 * std::sqrt(96 / n)) << init_std;  // Var(z^4) = 96.
    // Neighbouring elements are independent (their uniforms come from distinct Philox keys).
    EXPECT_LT(std::fabs(lag / (n - 1)), 6 / std::sqrt(n)) << init_std;
  }
}

TEST(InitializeSliceTest, ValuesDependOnSeedAndNameAndScaleWithStd) {
  const ParamSpec a = Spec("a.weight", {64, 33}, -1, Init::kNormal, 0.5);
  ParamSpec b = a;
  b.name = "b.weight";
  ParamSpec a_big = a;
  a_big.init_std = 2.0;
  const std::vector<float> va = FullValues(a, 5), va_again = FullValues(a, 5);
  const std::vector<float> vb = FullValues(b, 5), va_seed = FullValues(a, 6);
  const std::vector<float> va_big = FullValues(a_big, 5);
  EXPECT_EQ(va, va_again);  // Deterministic.
  int same_name = 0, same_seed = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    same_name += va[i] == vb[i];
    same_seed += va[i] == va_seed[i];
    // Same normal draw, scaled by a power of two: values are float(std * z), exactly.
    EXPECT_EQ(va_big[i], 4.0f * va[i]) << i;
  }
  EXPECT_EQ(same_name, 0);
  EXPECT_EQ(same_seed, 0);
}

TEST(InitializeSliceTest, ConstantInits) {
  for (Init init : {Init::kZeros, Init::kOnes}) {
    const ParamSpec spec = Spec("ln.weight", {12}, 0, init);
    Tensor t = ::mt::testing::RandomTensor({6}, DType::kF32, 3);  // Overwritten entirely.
    ASSERT_TRUE(InitializeSlice(spec, 1, 2, 9, t.view()).ok());
    for (double v : ToDoubles(t.view())) EXPECT_EQ(v, init == Init::kOnes ? 1.0 : 0.0);
  }
}

TEST(InitializeSliceTest, RejectsBadDestinations) {
  const ParamSpec spec = Spec("w", {8, 6}, 1);
  Tensor wrong_shape = Tensor::Host({8, 6}, DType::kF32);  // Local is [8, 3] at TP 2.
  absl::Status s = InitializeSlice(spec, 0, 2, 1, wrong_shape.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("InitializeSlice"), std::string::npos) << s;
  Tensor wrong_dtype = Tensor::Host({8, 3}, DType::kF16);
  EXPECT_EQ(InitializeSlice(spec, 0, 2, 1, wrong_dtype.view()).code(),
            absl::StatusCode::kInvalidArgument);
  Tensor big = Tensor::Host({8, 6}, DType::kF32);
  TensorView strided = big.view();
  strided.shape = {8, 3};  // Every other column: not contiguous.
  strided.strides = {6, 2};
  EXPECT_EQ(InitializeSlice(spec, 0, 2, 1, strided).code(), absl::StatusCode::kInvalidArgument);
  Tensor ok = Tensor::Host({8, 2}, DType::kF32);
  EXPECT_EQ(InitializeSlice(spec, 0, 4, 1, ok.view()).code(),  // 6 % 4 != 0.
            absl::StatusCode::kInvalidArgument);
}

TEST(ParameterStoreTest, AddAllocateFindAndFlatViews) {
  ParameterStore store(/*tp_rank=*/1, /*tp_size=*/2);
  const ParamSpec a = Spec("a.weight", {6, 4}, 0, Init::kNormal, 0.1);
  const ParamSpec b = Spec("a.gamma", {6}, -1, Init::kOnes);
  const ParamSpec c = Spec("c.weight", {4, 6}, 1, Init::kNormal, 0.2);
  const ParamSpec z = Spec("c.bias", {6}, 0, Init::kZeros);
  auto ha = store.Add(a);
  auto hb = store.Add(b);
  auto hc = store.Add(c);
  auto hz = store.Add(z);
  ASSERT_TRUE(ha.ok() && hb.ok() && hc.ok() && hz.ok());
  EXPECT_EQ(*ha, 0);
  EXPECT_EQ(*hb, 1);
  EXPECT_EQ(*hc, 2);
  EXPECT_EQ(*hz, 3);

  // Rejected declarations leave the store unchanged.
  auto dup = store.Add(Spec("a.weight", {2}, -1));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("duplicate"), std::string::npos) << dup.status();
  EXPECT_NE(dup.status().message().find("a.weight"), std::string::npos) << dup.status();
  auto odd = store.Add(Spec("d.weight", {5, 4}, 0));  // 5 rows over 2 ranks.
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.size(), 4);
  EXPECT_EQ(store.NumLocalElements(), 12 + 6 + 12 + 3);
  EXPECT_EQ(store.NumGlobalElements(), 24 + 6 + 24 + 6);

  ASSERT_TRUE(store.Allocate(/*seed=*/9).ok());
  EXPECT_EQ(store.value(0).shape, (Shape{3, 4}));
  EXPECT_EQ(store.value(1).shape, (Shape{6}));
  EXPECT_EQ(store.value(2).shape, (Shape{4, 3}));
  EXPECT_EQ(store.grad(2).shape, (Shape{4, 3}));
  EXPECT_EQ(store.spec(2).name, "c.weight");

  // One flat buffer each, in declaration order, without gaps.
  const TensorView fv = store.flat_values(), fg = store.flat_grads();
  EXPECT_EQ(fv.shape, (Shape{store.NumLocalElements()}));
  EXPECT_EQ(fg.shape, (Shape{store.NumLocalElements()}));
  EXPECT_EQ(fv.dtype, DType::kF32);
  int64_t offset = 0;
  for (int i = 0; i < store.size(); ++i) {
    EXPECT_EQ(store.value(i).data_as<float>(), fv.data_as<float>() + offset) << i;
    EXPECT_EQ(store.grad(i).data_as<float>(), fg.data_as<float>() + offset) << i;
    EXPECT_TRUE(store.value(i).IsContiguous());
    offset += store.value(i).numel();
  }

  // Values: this rank's slices of the initialisation; gradients zero.
  for (int i : {0, 2}) {
    Tensor expect = Tensor::Host(store.value(i).shape, DType::kF32);
    ASSERT_TRUE(InitializeSlice(store.spec(i), 1, 2, 9, expect.view()).ok());
    EXPECT_EQ(ToDoubles(store.value(i)), ToDoubles(expect.view())) << store.spec(i).name;
  }
  for (double v : ToDoubles(store.value(1))) EXPECT_EQ(v, 1.0);
  for (double v : ToDoubles(store.value(3))) EXPECT_EQ(v, 0.0);
  for (double v : ToDoubles(fg)) EXPECT_EQ(v, 0.0);

  auto found = store.Find("c.weight");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, 2);
  auto missing = store.Find("c.weigh");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("c.weigh"), std::string::npos);

  // Writes through the per-parameter views are seen through the flat views and vice versa;
  // ZeroGrads clears every gradient and no value.
  const std::vector<double> values_before = ToDoubles(fv);
  for (int64_t j = 0; j < fg.numel(); ++j) fg.data_as<float>()[j] = 0.5f + j;
  EXPECT_EQ(store.grad(2).data_as<float>()[1], 0.5f + 12 + 6 + 1);
  store.grad(3).data_as<float>()[2] = -3.0f;
  EXPECT_EQ(fg.data_as<float>()[12 + 6 + 12 + 2], -3.0f);
  store.ZeroGrads();
  for (double v : ToDoubles(fg)) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(ToDoubles(fv), values_before);
}

TEST(ParameterStoreTest, SerialAndShardedStoresHoldTheSameGlobalValues) {
  const std::vector<ParamSpec> specs = {
      Spec("p.w", {4, 6}, 1, Init::kNormal, 0.3), Spec("p.b", {6}, 0, Init::kNormal, 0.3),
      Spec("q.w", {6, 4}, 0, Init::kNormal, 0.3), Spec("q.b", {4}, -1, Init::kNormal, 0.3)};
  ParameterStore serial(0, 1);
  for (const ParamSpec& s : specs) ASSERT_TRUE(serial.Add(s).ok());
  ASSERT_TRUE(serial.Allocate(31).ok());
  for (int tp : {2, 3}) {
    for (int r = 0; r < tp; ++r) {
      ParameterStore store(r, tp);
      for (const ParamSpec& s : specs) ASSERT_TRUE(store.Add(s).ok());
      ASSERT_TRUE(store.Allocate(31).ok());
      for (int i = 0; i < store.size(); ++i) {
        const TensorView lv = store.value(i);
        const float* full = serial.value(i).data_as<float>();
        for (int64_t j = 0; j < lv.numel(); ++j) {
          ASSERT_EQ(lv.data_as<float>()[j], full[GlobalIndexOf(specs[i], lv.shape, r, j)])
              << specs[i].name << " tp=" << tp << " rank=" << r << " j=" << j;
        }
      }
    }
  }
}

TEST(ParameterStoreTest, F32ComputeWeightsAreTheMasterWeights) {
  ParameterStore store(0, 1);
  ASSERT_TRUE(store.Add(Spec("w", {3, 5}, -1, Init::kNormal, 0.5)).ok());
  ASSERT_TRUE(store.Add(Spec("b", {5}, -1, Init::kOnes)).ok());
  ASSERT_TRUE(store.Allocate(4).ok());
  EXPECT_EQ(store.compute_dtype(), DType::kF32);
  for (int i = 0; i < store.size(); ++i) {
    EXPECT_EQ(store.compute_value(i).data, store.value(i).data);  // No copy.
    EXPECT_EQ(store.compute_value(i).dtype, DType::kF32);
  }
  EXPECT_EQ(store.flat_compute_values().data, store.flat_values().data);
  EXPECT_TRUE(store.RefreshComputeWeights(ExecContext{}).ok());
}

class ComputeDTypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(ComputeDTypeTest, ComputeCopiesAreRoundedMastersUntilTheNextRefresh) {
  const DType dt = GetParam();
  ParameterStore store(/*tp_rank=*/1, /*tp_size=*/2, dt);
  ASSERT_TRUE(store.Add(Spec("w", {4, 6}, 1, Init::kNormal, 0.7)).ok());
  ASSERT_TRUE(store.Add(Spec("g", {5}, -1, Init::kOnes)).ok());
  ASSERT_TRUE(store.Add(Spec("v", {6, 3}, 0, Init::kNormal, 0.01)).ok());
  ASSERT_TRUE(store.Allocate(8).ok());
  EXPECT_EQ(store.compute_dtype(), dt);
  EXPECT_EQ(store.flat_values().dtype, DType::kF32);  // Masters and gradients stay f32.
  EXPECT_EQ(store.flat_grads().dtype, DType::kF32);
  const TensorView flat = store.flat_compute_values();
  EXPECT_EQ(flat.dtype, dt);
  EXPECT_EQ(flat.shape, (Shape{store.NumLocalElements()}));
  // Each copy is its master rounded to nearest (relative error <= u; the masters are normal
  // numbers well inside both formats' ranges), laid out like the masters in one flat buffer.
  const double u = ::mt::testing::UnitRoundoff(dt);
  int64_t offset = 0;
  for (int i = 0; i < store.size(); ++i) {
    const TensorView cv = store.compute_value(i);
    EXPECT_EQ(cv.dtype, dt);
    EXPECT_EQ(cv.shape, store.value(i).shape);
    EXPECT_EQ(static_cast<const char*>(cv.data),
              static_cast<const char*>(flat.data) + offset * DTypeSize(dt));
    const std::vector<double> master = ToDoubles(store.value(i));
    const std::vector<double> copy = ToDoubles(cv);
    bool any_inexact = false;
    for (size_t j = 0; j < master.size(); ++j) {
      EXPECT_LE(std::fabs(copy[j] - master[j]), u * std::fabs(master[j])) << i << " " << j;
      any_inexact |= copy[j] != master[j];
    }
    if (store.spec(i).init == Init::kNormal) {
      EXPECT_TRUE(any_inexact) << "the copies are rounded";
    }
    offset += cv.numel();
  }
  // Changing a master does not touch its copy until the refresh; then the copy follows it.
  store.value(0).data_as<float>()[2] = 3.0f;
  store.value(1).data_as<float>()[0] = -0.5f;
  EXPECT_NE(ToDoubles(store.compute_value(0))[2], 3.0);
  ThreadPool pool(3);
  ExecContext ctx;
  ctx.pool = &pool;
  ASSERT_TRUE(store.RefreshComputeWeights(ctx).ok());
  EXPECT_EQ(ToDoubles(store.compute_value(0))[2], 3.0);
  EXPECT_EQ(ToDoubles(store.compute_value(1))[0], -0.5);
  // Values too large for f16 overflow to infinity, as a cast would.
  if (dt == DType::kF16) {
    store.value(2).data_as<float>()[0] = 1e6f;
    ASSERT_TRUE(store.RefreshComputeWeights(ExecContext{}).ok());
    EXPECT_TRUE(std::isinf(ToDoubles(store.compute_value(2))[0]));
  }
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, ComputeDTypeTest, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// ReleaseMasters (the distributed optimizer's sharded masters): the whole master buffer goes,
// the f32_compute parameters keep their masters (same values, a compact buffer), the compute
// copies stay; what would read or change the released masters is refused, and
// SetComputeWeightsFromHost sets every copy (rounded to nearest even, checked against a rounding
// by hand) and the kept masters.
TEST(ParameterStoreTest, ReleasedMastersKeepOnlyTheF32ComputeParameters) {
  ParameterStore store(/*tp_rank=*/0, /*tp_size=*/2, DType::kBF16);
  ParamSpec gain = Spec("ln.weight", {6}, -1, Init::kOnes);
  gain.f32_compute = true;
  ASSERT_TRUE(store.Add(Spec("w", {4, 6}, 1, Init::kNormal, 0.7)).ok());
  ASSERT_TRUE(store.Add(gain).ok());
  ASSERT_TRUE(store.Add(Spec("v", {6, 3}, 0, Init::kNormal, 0.01)).ok());
  ASSERT_TRUE(store.Allocate(8).ok());
  const ExecContext ctx;
  const std::vector<double> copies_before = ToDoubles(store.flat_compute_values());
  store.value(1).data_as<float>()[3] = 1.25f;
  ASSERT_TRUE(store.masters_whole());
  ASSERT_TRUE(store.ReleaseMasters(ctx).ok());
  EXPECT_FALSE(store.masters_whole());
  EXPECT_EQ(ToDoubles(store.flat_compute_values()), copies_before);
  EXPECT_EQ(ToDoubles(store.value(1)), (std::vector<double>{1, 1, 1, 1.25, 1, 1}));
  EXPECT_EQ(store.local_shape(0), (Shape{4, 3}));
  // Refused: a second release, anything that reads or sets all the masters.
  EXPECT_EQ(store.ReleaseMasters(ctx).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.RefreshComputeWeights(ctx).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.CopyValuesToHost(ctx).status().code(), absl::StatusCode::kFailedPrecondition);
  Tensor host = Tensor::Host({store.NumLocalElements()}, DType::kF32);
  EXPECT_EQ(store.CopyValuesFromHost(ctx, host.view()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_DEATH(store.value(0), "sharded by the distributed optimizer");
  EXPECT_DEATH(store.flat_values(), "sharded by the distributed optimizer");
  // A mirror made afterwards sees the same kept master and none of the others.
  auto mirror = ParameterStore::Mirror(&store, 0);
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  EXPECT_FALSE((*mirror)->masters_whole());
  EXPECT_EQ((*mirror)->value(1).data, store.value(1).data);
  // New weights: 1 + k/256 rounds to bf16 (8 significant bits) to nearest even by hand.
  float* h = host.data_as<float>();
  for (int64_t k = 0; k < host.numel(); ++k) h[k] = 1.0f + static_cast<float>(k) / 256.0f;
  ASSERT_TRUE(store.SetComputeWeightsFromHost(ctx, host.view()).ok());
  const std::vector<double> copies = ToDoubles(store.flat_compute_values());
  for (int64_t k = 0; k < host.numel(); ++k) {
    // Representable: 1 + j/128; k/256 halfway for odd k, which goes to the even j.
    const int64_t j = k % 2 == 0 ? k / 2 : ((k / 2) % 2 == 0 ? k / 2 : k / 2 + 1);
    EXPECT_EQ(copies[k], 1.0 + j / 128.0) << k;
  }
  for (int64_t k = 0; k < 6; ++k) {
    EXPECT_EQ(store.value(1).data_as<float>()[k], h[store.offset(1) + k]) << k;
  }
  Tensor wrong = Tensor::Host({3}, DType::kF32);
  EXPECT_EQ(store.SetComputeWeightsFromHost(ctx, wrong.view()).code(),
            absl::StatusCode::kInvalidArgument);
  // An f32 store has nothing to release; a store with whole masters takes CopyValuesFromHost.
  ParameterStore f32(0, 1);
  ASSERT_TRUE(f32.Add(Spec("w", {2}, -1)).ok());
  ASSERT_TRUE(f32.Allocate(1).ok());
  EXPECT_EQ(f32.ReleaseMasters(ctx).code(), absl::StatusCode::kFailedPrecondition);
  Tensor two = Tensor::Host({2}, DType::kF32);
  EXPECT_EQ(f32.SetComputeWeightsFromHost(ctx, two.view()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ParameterStoreTest, SameDeclarationComparesWhatPartitionsAParameter) {
  const ParamSpec a = Spec("w", {8, 4}, 0);
  ParamSpec b = Spec("w", {8, 4}, 0, Init::kZeros, 0.5);  // Another initialisation: the same.
  b.weight_decay = false;
  EXPECT_TRUE(SameDeclaration(a, b));
  EXPECT_FALSE(SameDeclaration(a, Spec("v", {8, 4}, 0)));
  EXPECT_FALSE(SameDeclaration(a, Spec("w", {8, 2}, 0)));
  EXPECT_FALSE(SameDeclaration(a, Spec("w", {8, 4}, 1)));
  ParamSpec padded = a;
  padded.vocab_padded = true;
  EXPECT_FALSE(SameDeclaration(a, padded));
}

TEST(ParameterStoreTest, AMirrorRepeatsTheOwnersDeclarationsOverItsBuffers) {
  ParameterStore owner(/*tp_rank=*/0, /*tp_size=*/2, DType::kBF16);
  const std::vector<ParamSpec> specs = {Spec("embed", {8, 4}, 0), Spec("l0.weight", {4, 6}, 1),
                                        Spec("l0.bias", {6}, 0, Init::kZeros)};
  for (const ParamSpec& spec : specs) ASSERT_TRUE(owner.Add(spec).ok());
  EXPECT_EQ(ParameterStore::Mirror(&owner, 1).status().code(),
            absl::StatusCode::kInvalidArgument);  // Not allocated yet.
  ASSERT_TRUE(owner.Allocate(/*seed=*/3).ok());
  for (int bad : {-1, 4}) {
    EXPECT_EQ(ParameterStore::Mirror(&owner, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }

  // A second instance of the layer declared from handle 1 gets handles 1 and 2 and the owner's
  // views; a mirror of the mirror still leads to the owner's buffers.
  auto mirror = ParameterStore::Mirror(&owner, 1);
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  ParameterStore& m = **mirror;
  EXPECT_TRUE(m.is_mirror());
  EXPECT_FALSE(owner.is_mirror());
  EXPECT_EQ(m.size(), 1);
  auto wrong = m.Add(Spec("l0.bias", {6}, 0));  // Out of order.
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("l0.weight"), std::string::npos) << wrong.status();
  EXPECT_EQ(m.Add(Spec("l0.weight", {4, 12}, 1)).status().code(),  // Another shape.
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Add(Spec("l0.weight", {4, 6}, 0)).status().code(),  // Another split.
            absl::StatusCode::kInvalidArgument);
  auto w = m.Add(specs[1]);
  auto b = m.Add(specs[2]);
  ASSERT_TRUE(w.ok() && b.ok()) << w.status() << b.status();
  EXPECT_EQ(*w, 1);
  EXPECT_EQ(*b, 2);
  EXPECT_EQ(m.size(), 3);
  EXPECT_EQ(m.Add(Spec("l1.weight", {4, 6}, 1)).status().code(),  // Past the owner's end.
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Allocate(1).code(), absl::StatusCode::kFailedPrecondition);
  for (int h = 0; h < 3; ++h) {
    EXPECT_EQ(m.value(h).data, owner.value(h).data);
    EXPECT_EQ(m.grad(h).data, owner.grad(h).data);
    EXPECT_EQ(m.compute_value(h).data, owner.compute_value(h).data);
    EXPECT_EQ(m.compute_value(h).dtype, DType::kBF16);
  }
  EXPECT_EQ(m.flat_values().data, owner.flat_values().data);
  EXPECT_EQ(m.flat_grads().data, owner.flat_grads().data);
  EXPECT_EQ(m.flat_compute_values().data, owner.flat_compute_values().data);
  EXPECT_EQ(m.NumLocalElements(), owner.NumLocalElements());
  auto again = ParameterStore::Mirror(&m, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->flat_grads().data, owner.flat_grads().data);

  // Gradients written through the mirror are the owner's; zeroing through it zeroes the owner's;
  // masters written through it refresh the owner's compute copies (1.5 is exact in bf16).
  m.grad(1).data_as<float>()[0] = 2.5f;
  EXPECT_EQ(owner.grad(1).data_as<float>()[0], 2.5f);
  m.ZeroGrads();
  EXPECT_EQ(owner.grad(1).data_as<float>()[0], 0.0f);
  Tensor host = Tensor::Zeros({owner.NumLocalElements()}, DType::kF32);
  host.data_as<float>()[0] = 1.5f;
  ASSERT_TRUE(m.CopyValuesFromHost(ExecContext(), host.view()).ok());
  const std::vector<double> first = ToDoubles(owner.compute_value(0));
  EXPECT_EQ(first[0], 1.5);
}

TEST(ParameterStoreDeathTest, NonFloatComputeDTypeIsAProgrammerError) {
  EXPECT_DEATH(ParameterStore(0, 1, DType::kI32), "compute dtype i32");
}

TEST(ParameterStoreDeathTest, AddAfterAllocateIsAProgrammerError) {
  ParameterStore store(0, 1);
  ASSERT_TRUE(store.Add(Spec("w", {2, 2}, -1)).ok());
  ASSERT_TRUE(store.Allocate(1).ok());
  EXPECT_DEATH((void)store.Add(Spec("v", {2}, -1)), "Add after Allocate");
}

TEST(NameHashTest, StableAndDistinct) {
  EXPECT_EQ(NameHash("layers.1.w"), NameHash(std::string("layers.1.w")));
  EXPECT_NE(NameHash("layers.1.w"), NameHash("layers.2.w"));
  EXPECT_NE(NameHash("a.weight"), NameHash("a.bias"));
  EXPECT_NE(NameHash(""), NameHash("a"));
}

// parameter.h documents NameHash as FNV-1a, but parameter.cc starts from 1469598103934665603
// (the 64-bit offset basis 14695981039346656037 with its last digit dropped), so it is a stable
// hash but not FNV-1a. Disabled until the lead decides on the one-line fix (which changes every
// initial value); run with --gtest_also_run_disabled_tests to see it fail.
TEST(NameHashTest, IsFnv1a64) {
  // Published FNV-1a 64 values: "" hashes to the offset basis.
  EXPECT_EQ(NameHash(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(NameHash("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(NameHash("foobar"), 0x85944171f73967e8ull);
}

}  // namespace
}  // namespace nn
}  // namespace mt
