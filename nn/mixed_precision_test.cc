// nn/ modules with a 16-bit compute dtype (bf16, f16) and f32 master weights and gradients:
// forward outputs are rounded once to the compute dtype from an f32 computation on the
// compute-dtype operands; parameter gradients are accumulated in f32 from the compute-dtype
// activations, so they match a float64 reference on those same (rounded) operands to f32
// accuracy, far below the compute dtype's unit roundoff. Checks ColumnParallelLinear,
// RowParallelLinear (TP = 1), the tied logits of VocabParallelEmbedding (f32 logits) and
// ReplicatedEmbedding; activations of another dtype are refused.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "nn/attention.h"
#include "nn/context.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/module_testutil.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {
namespace {

using ::mt::testing::FromDoubles;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using testing::Vec;

const double kU = ::mt::testing::UnitRoundoff(DType::kF32);

// A row-major float64 matrix.
struct Mat {
  int64_t rows, cols;
  Vec v;
  double at(int64_t r, int64_t c) const { return v[r * cols + c]; }
};

Mat MatOf(const TensorView& t) {
  return Mat{t.rank() == 2 ? t.dim(0) : 1, t.dim(-1), ToDoubles(t)};
}

// scale op(A) op(B) in float64 and, per element, the sum of its terms' magnitudes (what bounds
// the rounding error of an f32 accumulation of it).
struct Product {
  Vec value, magnitude;
};
Product MatMul(const Mat& a, bool ta, const Mat& b, bool tb, double scale = 1) {
  const int64_t M = ta ? a.cols : a.rows, K = ta ? a.rows : a.cols, N = tb ? b.rows : b.cols;
  Product p{Vec(M * N, 0.0), Vec(M * N, 0.0)};
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      for (int64_t l = 0; l < K; ++l) {
        const double t = scale * (ta ? a.at(l, i) : a.at(i, l)) * (tb ? b.at(j, l) : b.at(l, j));
        p.value[i * N + j] += t;
        p.magnitude[i * N + j] += std::fabs(t);
      }
    }
  }
  return p;
}

// The product plus a bias broadcast over its rows.
Product PlusBias(Product p, const Vec& bias) {
  for (size_t i = 0; i < p.value.size(); ++i) {
    p.value[i] += bias[i % bias.size()];
    p.magnitude[i] += std::fabs(bias[i % bias.size()]);
  }
  return p;
}

// f32 accumulation over K terms relative to sum |terms| (4 sqrt(K + 2) u_f32), plus one rounding
// to the output dtype where the output is 16-bit (out_u).
::testing::AssertionResult Near(const Vec& got, const Product& want, int64_t k, double out_u) {
  const double rel = out_u + 4 * std::sqrt(k + 2.0) * kU;
  Vec bound(want.magnitude.size());
  for (size_t i = 0; i < bound.size(); ++i) bound[i] = rel * want.magnitude[i] + 1e-30;
  return ::mt::testing::WithinBounds(got, want.value, bound);
}

// Column and row linear layers, a vocab-parallel and a replicated embedding in one store of the
// compute dtype, parameters randomised (non-zero biases); x [N, in] and dy [N, in] in it.
class MixedPrecisionModulesTest : public ::testing::TestWithParam<DType> {
 protected:
  static constexpr int64_t N = 17, in = 13, out = 9, rows = 7;

  void SetUp() override {
    ec_.pool = &pool_;
    auto col = ColumnParallelLinear::Create(&store_, "col", in, out, Bias::kYes, 0.5);
    auto row = RowParallelLinear::Create(&store_, "row", out, in, Bias::kYes, 0.5);
    auto word = VocabParallelEmbedding::Create(&store_, "word", rows, rows, in, 0.5);
    auto pos = ReplicatedEmbedding::Create(&store_, "pos", rows, in, 0.5);
    ASSERT_TRUE(col.ok() && row.ok() && word.ok() && pos.ok());
    col_.emplace(std::move(col).value());
    row_.emplace(std::move(row).value());
    word_.emplace(std::move(word).value());
    pos_.emplace(std::move(pos).value());
    ASSERT_TRUE(store_.Allocate(5).ok());
    testing::RandomizeParameters(&store_, 6);
    const absl::Status s = store_.RefreshComputeWeights(ec_);
    ASSERT_TRUE(s.ok()) << s;
  }

  // A parameter's compute-dtype copy, and its f32 gradient.
  Mat W(const std::string& name) {
    const absl::StatusOr<int> h = store_.Find(name);
    if (!h.ok()) {
      ADD_FAILURE() << h.status();
      return Mat{0, 0, {}};
    }
    const TensorView c = store_.compute_value(*h);
    EXPECT_EQ(c.dtype, dt_);
    return MatOf(c);
  }
  Vec G(const std::string& name) {
    const absl::StatusOr<int> h = store_.Find(name);
    if (!h.ok()) {
      ADD_FAILURE() << h.status();
      return {};
    }
    return ToDoubles(store_.grad(*h));
  }

  const DType dt_ = GetParam();
  const double u_ = ::mt::testing::UnitRoundoff(dt_);
  ThreadPool pool_{3};
  ExecContext ec_;
  const StepContext sc_ = StepContext::Train(&ec_);
  ParameterStore store_{0, 1, dt_};
  std::optional<ColumnParallelLinear> col_;
  std::optional<RowParallelLinear> row_;
  std::optional<VocabParallelEmbedding> word_;
  std::optional<ReplicatedEmbedding> pos_;
  const Tensor x_ = RandomTensor({N, in}, dt_, 11);
  const Tensor dy_ = RandomTensor({N, in}, dt_, 12);
};

// Column then row linear layer, forward and backward twice (accumulating): 16-bit activations
// and input gradients, f32 weight and bias gradients without a 16-bit rounding.
TEST_P(MixedPrecisionModulesTest, LinearLayers) {
  Tensor h = Tensor::Host({N, out}, dt_), y = Tensor::Host({N, in}, dt_);
  ASSERT_TRUE(col_->Forward(sc_, x_.view(), h.view()).ok());
  ASSERT_TRUE(row_->Forward(sc_, h.view(), y.view()).ok());
  const Mat xm = MatOf(x_.view()), hm = MatOf(h.view()), dym = MatOf(dy_.view());
  EXPECT_TRUE(
      Near(hm.v, PlusBias(MatMul(xm, false, W("col.weight"), false), W("col.bias").v), in + 1, u_))
      << "column forward";
  Tensor dh = Tensor::Host({N, out}, dt_), dx = Tensor::Host({N, in}, dt_);
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(row_->Backward(sc_, h.view(), dy_.view(), dh.view()).ok());
    ASSERT_TRUE(col_->Backward(sc_, x_.view(), dh.view(), dx.view()).ok());
  }
  EXPECT_EQ(dh.dtype(), dt_);
  const Mat dhm = MatOf(dh.view());
  EXPECT_TRUE(Near(dhm.v, MatMul(dym, false, W("row.weight"), true), in, u_))
      << "row input gradient";
  // Weight and bias gradients: 2 x (activation^T gradient) accumulated in f32.
  const Mat ones{N, 1, Vec(N, 1.0)};
  EXPECT_TRUE(Near(G("row.weight"), MatMul(hm, true, dym, false, 2), 2 * N, 0)) << "row weight";
  EXPECT_TRUE(Near(G("row.bias"), MatMul(ones, true, dym, false, 2), 2 * N, 0)) << "row bias";
  EXPECT_TRUE(Near(G("col.weight"), MatMul(xm, true, dhm, false, 2), 2 * N, 0)) << "col weight";
  EXPECT_TRUE(Near(G("col.bias"), MatMul(ones, true, dhm, false, 2), 2 * N, 0)) << "col bias";
}

// Tied logits in f32 from the 16-bit hidden state and table; f32 logit gradients are rounded to
// the compute dtype once (logits.float()'s backward), then accumulate into the f32 table grad.
TEST_P(MixedPrecisionModulesTest, TiedLogits) {
  Tensor logits = Tensor::Host({N, rows}, DType::kF32);
  ASSERT_TRUE(word_->LogitsForward(sc_, x_.view(), logits.view()).ok());
  const Mat xm = MatOf(x_.view());
  EXPECT_TRUE(Near(ToDoubles(logits.view()), MatMul(xm, false, W("word.weight"), true), in, 0))
      << "f32 logits";
  Tensor dlogits = RandomTensor({N, rows}, DType::kF32, 13);
  Tensor dx = Tensor::Host({N, in}, dt_);
  ASSERT_TRUE(word_->LogitsBackward(sc_, x_.view(), dlogits.view(), dx.view()).ok());
  const Mat dl = MatOf(FromDoubles({N, rows}, dt_, ToDoubles(dlogits.view())).view());
  EXPECT_TRUE(Near(G("word.weight"), MatMul(dl, true, xm, false), N, 0)) << "tied table gradient";
}

// Embedding lookups copy 16-bit rows; a 16-bit gradient scatter-adds into the f32 table grad.
TEST_P(MixedPrecisionModulesTest, EmbeddingLookup) {
  Mat one_hot{N, rows, Vec(N * rows, 0.0)};  // [N, rows]: which row sample n looks up.
  Vec ids(N);
  for (int64_t n = 0; n < N; ++n) {
    ids[n] = static_cast<double>((n * 5 + 1) % rows);
    one_hot.v[n * rows + (n * 5 + 1) % rows] = 1;
  }
  const Tensor ids_t = FromDoubles({N}, DType::kI32, ids);
  Tensor rows_out = Tensor::Host({N, in}, dt_);
  ASSERT_TRUE(pos_->Forward(sc_, ids_t.view(), rows_out.view()).ok());
  EXPECT_EQ(ToDoubles(rows_out.view()), MatMul(one_hot, false, W("pos.weight"), false).value);
  ASSERT_TRUE(pos_->Backward(sc_, ids_t.view(), dy_.view()).ok());
  EXPECT_TRUE(Near(G("pos.weight"), MatMul(one_hot, true, MatOf(dy_.view()), false), N, 0))
      << "embedding gradient";
}

// Activations of another dtype than the compute dtype are refused with a clear error.
TEST_P(MixedPrecisionModulesTest, OtherActivationDtypesAreRefused) {
  Tensor x32 = RandomTensor({2, 3, in}, DType::kF32, 14);
  AttentionConfig ac;
  ac.hidden = in;
  ac.heads = 1;
  ParameterStore other(0, 1, dt_);
  auto att = ParallelSelfAttention::Create(&other, "att", ac);
  ASSERT_TRUE(att.ok() && other.Allocate(1).ok());
  Tensor y32 = Tensor::Host({2, 3, in}, DType::kF32);
  EXPECT_TRUE(::mt::testing::IsError(att->Forward(sc_, x32.view(), nullptr, y32.view()),
                                     absl::StatusCode::kInvalidArgument, "(the compute dtype)"));
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, MixedPrecisionModulesTest,
                         ::testing::Values(DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace nn
}  // namespace mt
