#include "core/ops/embedding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/simd.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::kFloatTypes;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomInts;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;

constexpr DType kIdTypes[] = {DType::kI32, DType::kI64};

// Reference forward in float64: out[n, c] = table[ids[n] - start, c] inside the table, else 0.
std::vector<double> RefEmbedding(const std::vector<double>& ids, const std::vector<double>& table,
                                 int64_t V, int64_t C, int64_t start) {
  std::vector<double> out(ids.size() * C, 0.0);
  for (size_t n = 0; n < ids.size(); ++n) {
    const int64_t r = static_cast<int64_t>(ids[n]) - start;
    if (r < 0 || r >= V) continue;
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = table[r * C + c];
  }
  return out;
}

// A non-zero sentinel, so that tests see every element being written.
void FillSentinel(const TensorView& t) {
  mt::testing::WriteDoubles(std::vector<double>(t.numel(), 7.0), t);
}

// On the calling thread and on a pool, every dtype, id dtype and N in {1, 3, 17, 129}, and every
// width C in `widths`. Stops at the first fatal failure.
void ForEachCase(const std::vector<int64_t>& widths,
                 const std::function<void(const ExecContext& ctx, DType dt, DType it, int64_t N,
                                          int64_t C)>& body) {
  ThreadPool pool(3);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const ExecContext ctx{p};
    for (DType dt : kFloatTypes) {
      for (DType it : kIdTypes) {
        for (int64_t N : {1, 3, 17, 129}) {
          for (int64_t C : widths) {
            SCOPED_TRACE(::testing::Message() << DTypeName(dt) << " " << DTypeName(it) << " N=" << N
                                              << " C=" << C << " pool=" << (p != nullptr));
            body(ctx, dt, it, N, C);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(EmbeddingTest, ForwardGathersRowsOfEveryDType) {
  ForEachCase({1, 5, 33}, [](const ExecContext& ctx, DType dt, DType it, int64_t N, int64_t C) {
    const int64_t V = 11;
    Tensor ids = RandomInts({N}, it, 100 + N, 0, V);
    Tensor table = RandomTensor({V, C}, dt, 200 + C);
    Tensor out = Tensor::Host({N, C}, dt);
    FillSentinel(out.view());
    ASSERT_TRUE(Embedding(ctx, ids.view(), table.view(), out.view()).ok());
    // A copy: exact.
    EXPECT_TRUE(AllClose(out.view(),
                         RefEmbedding(ToDoubles(ids.view()), ToDoubles(table.view()), V, C, 0), 0.0,
                         0.0));
  });
}

TEST(EmbeddingTest, ForwardKeepsTheShapeOfIds) {
  const ExecContext ctx;
  const int64_t V = 9, C = 4;
  Tensor ids = RandomInts({2, 3}, DType::kI64, 1, 0, V);
  Tensor table = RandomTensor({V, C}, DType::kF32, 2);
  Tensor out3 = Tensor::Host({2, 3, C}, DType::kF32);
  Tensor out2 = Tensor::Host({6, C}, DType::kF32);
  ASSERT_TRUE(Embedding(ctx, ids.view(), table.view(), out3.view()).ok());
  ASSERT_TRUE(Embedding(ctx, ids.view(), table.view(), out2.view()).ok());
  const auto ref = RefEmbedding(ToDoubles(ids.view()), ToDoubles(table.view()), V, C, 0);
  EXPECT_TRUE(AllClose(out3.view(), ref, 0.0, 0.0));
  EXPECT_TRUE(AllClose(out2.view(), ref, 0.0, 0.0));
}

TEST(EmbeddingTest, ShardGivesZeroRowsOutsideItsRange) {
  ThreadPool pool(3);
  const int64_t G = 13, V = 4, C = 3, N = 40;
  // A 13-row vocabulary split into shards [0, 4), [4, 8), [8, 12), [12, 13).
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const ExecContext ctx{p};
    for (DType dt : kFloatTypes) {
      Tensor ids = RandomInts({N}, DType::kI32, 5, 0, G);
      std::vector<double> sum(N * C, 0.0);
      Tensor full_table = RandomTensor({G, C}, dt, 6);
      const std::vector<double> full = ToDoubles(full_table.view());
      for (int64_t start = 0; start < G; start += V) {
        const int64_t rows = std::min(V, G - start);
        Tensor shard = FromDoubles(
            {rows, C}, dt,
            std::vector<double>(full.begin() + start * C, full.begin() + (start + rows) * C));
        Tensor out = Tensor::Host({N, C}, dt);
        FillSentinel(out.view());
        ASSERT_TRUE(
            Embedding(ctx, ids.view(), shard.view(), out.view(), EmbeddingRange{start, G}).ok())
            << start;
        const auto ref =
            RefEmbedding(ToDoubles(ids.view()), ToDoubles(shard.view()), rows, C, start);
        EXPECT_TRUE(AllClose(out.view(), ref, 0.0, 0.0)) << start;
        const auto got = ToDoubles(out.view());
        for (int64_t i = 0; i < N * C; ++i) sum[i] += got[i];
      }
      // The all-reduce of the shards' outputs is the whole table's output.
      EXPECT_TRUE(AllClose(sum, RefEmbedding(ToDoubles(ids.view()), full, G, C, 0), 0.0, 0.0));
    }
  }
}

TEST(EmbeddingTest, BackwardAccumulatesRepeatedIdsAgainstFloat64) {
  ForEachCase({1, 5, 300}, [](const ExecContext& ctx, DType dt, DType it, int64_t N, int64_t C) {
    const int64_t V = 7;  // Few rows: many repeated ids.
    Tensor ids = RandomInts({N}, it, 300 + N, 0, V);
    Tensor dout = RandomTensor({N, C}, dt, 400 + C);
    Tensor dtable = RandomTensor({V, C}, dt, 500);
    const auto ids_d = ToDoubles(ids.view());
    const auto dout_d = ToDoubles(dout.view());
    std::vector<double> ref = ToDoubles(dtable.view());
    std::vector<double> abs_sum(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) abs_sum[i] = std::fabs(ref[i]);
    std::vector<int64_t> count(V, 0);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = static_cast<int64_t>(ids_d[n]);
      ++count[r];
      for (int64_t c = 0; c < C; ++c) {
        ref[r * C + c] += dout_d[n * C + c];
        abs_sum[r * C + c] += std::fabs(dout_d[n * C + c]);
      }
    }
    ASSERT_TRUE(EmbeddingBackward(ctx, ids.view(), dout.view(), dtable.view()).ok());
    // f32 accumulation of count + 1 terms, then one rounding to the dtype.
    const int64_t max_count = *std::max_element(count.begin(), count.end());
    const double max_abs = *std::max_element(abs_sum.begin(), abs_sum.end());
    EXPECT_TRUE(AllClose(dtable.view(), ref, 1.01 * UnitRoundoff(dt),
                         (max_count + 1) * UnitRoundoff(DType::kF32) * max_abs));
  });
}

TEST(EmbeddingTest, BackwardIsBitwiseIndependentOfThreadsAndSimdTarget) {
  // Many column blocks and touched rows, so that the pool really splits the work.
  ThreadPool pool(3);
  const int64_t V = 50, C = 600, N = 2001;
  for (DType dt : kFloatTypes) {
    Tensor ids = RandomInts({N}, DType::kI64, 7, 0, 2 * V);
    Tensor dout = RandomTensor({N, C}, dt, 8);
    Tensor a = RandomTensor({V, C}, dt, 9);
    const EmbeddingRange range{V, 3 * V};
    ASSERT_TRUE(
        EmbeddingBackward(ExecContext{nullptr}, ids.view(), dout.view(), a.view(), range).ok());
    for (const SimdTarget& target : SimdTargets()) {
      ScopedSimdTarget scope(target);
      Tensor b = RandomTensor({V, C}, dt, 9);
      ASSERT_TRUE(
          EmbeddingBackward(ExecContext{&pool}, ids.view(), dout.view(), b.view(), range).ok());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.nbytes())) << DTypeName(dt) << target.name;
    }
  }
}

TEST(EmbeddingTest, BackwardMatchesFiniteDifferencesOnAShard) {
  // L(table) = sum_{n,c} w[n,c] out[n,c]; dL/dtable by central differences of the f64 forward.
  // The shard holds rows [3, 9) of 13; ids repeat and many fall outside the shard.
  const int64_t G = 13, V = 6, C = 4, start = 3;
  const std::vector<double> ids_d = {0, 3, 4, 4, 12, 8, 3, 9, 2, 4, 5, 11, 8, 3, 7};
  const int64_t N = static_cast<int64_t>(ids_d.size());
  ThreadPool pool(3);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (DType it : kIdTypes) {
      Tensor ids = FromDoubles({N}, it, ids_d);
      Tensor table = RandomTensor({V, C}, DType::kF32, 10);
      Tensor w = RandomTensor({N, C}, DType::kF32, 11);
      const auto w_d = ToDoubles(w.view());
      auto loss = [&](const std::vector<double>& tab) {
        const auto out = RefEmbedding(ids_d, tab, V, C, start);
        double s = 0;
        for (size_t i = 0; i < out.size(); ++i) s += w_d[i] * out[i];
        return s;
      };
      const auto numeric = NumericalGradient(loss, ToDoubles(table.view()), 1e-3);
      Tensor dtable = Tensor::Zeros({V, C}, DType::kF32);
      ASSERT_TRUE(EmbeddingBackward(ExecContext{p}, ids.view(), w.view(), dtable.view(),
                                    EmbeddingRange{start, G})
                      .ok());
      EXPECT_TRUE(AllClose(dtable.view(), numeric, 1e-6, 1e-9));
      // Id 6 (row 3) never appears: its gradient is exactly zero.
      const auto got = ToDoubles(dtable.view());
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(got[3 * C + c], 0.0);
    }
  }
}

TEST(EmbeddingTest, OutOfRangeIdsAreErrorsAndWriteNothing) {
  const ExecContext ctx;
  const int64_t V = 5, C = 2;
  Tensor table = RandomTensor({V, C}, DType::kF32, 1);
  Tensor out = Tensor::Host({3, C}, DType::kF32);
  Tensor dtable = Tensor::Zeros({V, C}, DType::kF32);
  Tensor dout = RandomTensor({3, C}, DType::kF32, 2);
  for (double bad : {5.0, -1.0}) {
    for (DType it : kIdTypes) {
      Tensor ids = FromDoubles({3}, it, {1, bad, 2});
      FillSentinel(out.view());
      absl::Status s = Embedding(ctx, ids.view(), table.view(), out.view());
      EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
      EXPECT_NE(s.message().find("Embedding: ids element 1"), std::string::npos) << s;
      EXPECT_NE(s.message().find(absl::StrCat(static_cast<int>(bad))), std::string::npos) << s;
      EXPECT_TRUE(AllClose(out.view(), std::vector<double>(3 * C, 7.0), 0.0, 0.0));
      s = EmbeddingBackward(ctx, ids.view(), dout.view(), dtable.view());
      EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
      EXPECT_TRUE(AllClose(dtable.view(), std::vector<double>(V * C, 0.0), 0.0, 0.0));
    }
  }
  // A shard accepts any id of the global vocabulary, and only those.
  Tensor ids = FromDoubles({3}, DType::kI32, {1, 14, 2});
  EXPECT_TRUE(Embedding(ctx, ids.view(), table.view(), out.view(), EmbeddingRange{0, 15}).ok());
  EXPECT_TRUE(
      EmbeddingBackward(ctx, ids.view(), dout.view(), dtable.view(), EmbeddingRange{0, 15}).ok());
  EXPECT_EQ(Embedding(ctx, ids.view(), table.view(), out.view(), EmbeddingRange{5, 14}).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(EmbeddingTest, BadArgumentsAreErrors) {
  const ExecContext ctx;
  const int64_t V = 5, C = 2;
  Tensor ids = FromDoubles({3}, DType::kI32, {1, 0, 2});
  Tensor table = RandomTensor({V, C}, DType::kF32, 1);
  Tensor out = Tensor::Host({3, C}, DType::kF32);
  auto code = [](const absl::Status& s) { return s.code(); };
  // Shapes.
  Tensor wrong = Tensor::Host({3, C + 1}, DType::kF32);
  absl::Status s = Embedding(ctx, ids.view(), table.view(), wrong.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("out has shape [3, 3]"), std::string::npos) << s;
  Tensor table3 = RandomTensor({V, C, 1}, DType::kF32, 1);
  EXPECT_EQ(code(Embedding(ctx, ids.view(), table3.view(), out.view())),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(EmbeddingBackward(ctx, ids.view(), wrong.view(), table.view())),
            absl::StatusCode::kInvalidArgument);
  // Dtypes.
  Tensor out_bf16 = Tensor::Host({3, C}, DType::kBF16);
  s = Embedding(ctx, ids.view(), table.view(), out_bf16.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("out has dtype bf16"), std::string::npos) << s;
  Tensor fids = FromDoubles({3}, DType::kF32, {1, 0, 2});
  s = Embedding(ctx, fids.view(), table.view(), out.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("ids"), std::string::npos) << s;
  Tensor itable = RandomInts({V, C}, DType::kI32, 1, 0, 3);
  Tensor iout = Tensor::Host({3, C}, DType::kI32);
  EXPECT_EQ(code(Embedding(ctx, ids.view(), itable.view(), iout.view())),
            absl::StatusCode::kUnimplemented);
  // Contiguity.
  Tensor big = RandomTensor({V, 2 * C}, DType::kF32, 1);
  TensorView strided = big.view();
  strided.shape = {V, C};
  s = Embedding(ctx, ids.view(), strided, out.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("table"), std::string::npos) << s;
  // Ranges.
  EXPECT_EQ(code(Embedding(ctx, ids.view(), table.view(), out.view(), EmbeddingRange{3, 0})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Embedding(ctx, ids.view(), table.view(), out.view(), EmbeddingRange{3, 7})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Embedding(ctx, ids.view(), table.view(), out.view(), EmbeddingRange{-1, 7})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      code(EmbeddingBackward(ctx, ids.view(), out.view(), table.view(), EmbeddingRange{1, 5})),
      absl::StatusCode::kInvalidArgument);
  // Devices: a CUDA view is rejected before its memory is touched.
  TensorView cuda_ids = ids.view(), cuda_table = table.view(), cuda_out = out.view();
  cuda_ids.device = cuda_table.device = cuda_out.device = Device::Cuda(0);
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(Embedding(ctx, cuda_ids, cuda_table, cuda_out)));
  EXPECT_TRUE(
      ::mt::testing::RejectsFakeCudaViews(EmbeddingBackward(ctx, cuda_ids, cuda_out, cuda_table)));
  EXPECT_EQ(code(Embedding(ctx, cuda_ids, table.view(), out.view())),
            absl::StatusCode::kInvalidArgument);
  // Empty ids: nothing to do.
  Tensor no_ids = Tensor::Host({0}, DType::kI64);
  Tensor no_out = Tensor::Host({0, C}, DType::kF32);
  EXPECT_TRUE(Embedding(ctx, no_ids.view(), table.view(), no_out.view()).ok());
  EXPECT_TRUE(EmbeddingBackward(ctx, no_ids.view(), no_out.view(), table.view()).ok());
}

}  // namespace
}  // namespace ops
}  // namespace mt
