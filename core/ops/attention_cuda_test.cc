// The fused attention op on the GPU: forward and backward against the float64 reference of the
// unfused math (attention_testutil, the tolerances of the CPU kernel), repeatable bit for bit,
// with exactly the dropout mask of ops::Dropout; every dtype, causal and padding masks (fully
// masked rows included), Tq != Tk, head dims up to the kernels' limit, grouped keys and values
// (G < NH). Skipped without a GPU.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/attention.h"
#include "core/ops/attention_testutil.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/elementwise.h"
#include "core/ops/testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AttentionDims;
using ::mt::testing::AttentionInputs;
using ::mt::testing::AttentionReference;
using ::mt::testing::AttentionResult;
using ::mt::testing::CudaOpTest;
using ::mt::testing::EmptyDevice;
using ::mt::testing::MakeAttentionArgs;
using ::mt::testing::RandomAttentionInputs;
using ::mt::testing::RandomPaddingMask;
using ::mt::testing::SameBits;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
using ::testing::HasSubstr;

using AttentionCudaTest = CudaOpTest;

// Forward, then backward from the forward's out and lse, on the GPU; results copied back.
// args.padding_mask is ignored: `mask` (host, or null) is copied to the device.
AttentionResult RunOnGpu(const ExecContext& gpu, const AttentionDims& d, const AttentionInputs& in,
                         AttentionArgs args, const Tensor* mask) {
  const DType dt = in.q.dtype();
  const Tensor q = ToDevice(in.q), k = ToDevice(in.k), v = ToDevice(in.v), dout = ToDevice(in.dout);
  Tensor mask_dev;
  args.padding_mask = nullptr;
  if (mask != nullptr) {
    mask_dev = ToDevice(*mask);
    args.padding_mask = &mask_dev.view();
  }
  Tensor out = EmptyDevice(d.QShape(), dt), lse = EmptyDevice(d.LseShape(), DType::kF32);
  Tensor dq = EmptyDevice(d.QShape(), dt), dk = EmptyDevice(d.KShape(), dt),
         dv = EmptyDevice(d.KShape(), dt);
  absl::Status s = FusedAttention(gpu, q.view(), k.view(), v.view(), args, out.view(), lse.view());
  EXPECT_TRUE(s.ok()) << s;
  s = FusedAttentionBackward(gpu, q.view(), k.view(), v.view(), out.view(), dout.view(), lse.view(),
                             args, dq.view(), dk.view(), dv.view());
  EXPECT_TRUE(s.ok()) << s;
  return {ToHost(out.view()), ToHost(lse.view()), ToHost(dq.view()), ToHost(dk.view()),
          ToHost(dv.view())};
}

TEST_F(AttentionCudaTest, MatchesFloat64ReferenceAndRepeatsBitwise) {
  const std::vector<AttentionDims> dims = {
      {1, 1, 1, 1, 8}, {2, 3, 7, 7, 24}, {1, 2, 33, 33, 64}, {1, 2, 130, 130, 128},
      {2, 2, 5, 9, 8}, {2, 2, 9, 5, 24}, {1, 1, 70, 70, 96}, {1, 2, 40, 47, 37},
  };
  uint64_t seed = 300;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const AttentionDims& d : dims) {
      for (bool causal : {false, true}) {
        for (bool padded : {false, true}) {
          for (float p : {0.0f, 0.3f}) {
            SCOPED_TRACE(absl::StrCat(DTypeName(dt), " ", d.Name(), causal ? " causal" : "",
                                      padded ? " padded" : "", " p=", p));
            const AttentionInputs in = RandomAttentionInputs(d, dt, seed);
            seed += 4;
            const Tensor mask = RandomPaddingMask(d.B, d.Tk, seed++);
            const AttentionArgs args =
                MakeAttentionArgs(d, causal, padded ? &mask.view() : nullptr, p);
            const AttentionResult r = RunOnGpu(gpu_, d, in, args, padded ? &mask : nullptr);
            mt::testing::ExpectNearReference(r, AttentionReference(d, args, in), dt);
            const AttentionResult again = RunOnGpu(gpu_, d, in, args, padded ? &mask : nullptr);
            EXPECT_TRUE(SameBits(again, r));
          }
        }
      }
    }
  }
}

TEST_F(AttentionCudaTest, GroupedQueryAttentionMatchesFloat64Reference) {
  // k and v with G < NH heads: multi-query (G = 1) and G = 2 of 6 heads, several key tiles.
  const std::vector<AttentionDims> dims = {{2, 4, 7, 9, 8, 1}, {1, 6, 33, 70, 24, 2}};
  uint64_t seed = 700;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (const AttentionDims& d : dims) {
      for (bool causal : {false, true}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(dt), " ", d.Name(), causal ? " causal" : ""));
        const AttentionInputs in = RandomAttentionInputs(d, dt, seed);
        seed += 4;
        const Tensor mask = RandomPaddingMask(d.B, d.Tk, seed++);
        const AttentionArgs args = MakeAttentionArgs(d, causal, &mask.view(), 0.3f);
        const AttentionResult r = RunOnGpu(gpu_, d, in, args, &mask);
        mt::testing::ExpectNearReference(r, AttentionReference(d, args, in), dt);
      }
    }
  }
}

TEST_F(AttentionCudaTest, DropoutMaskIsExactlyThatOfTheDropoutOp) {
  ::mt::testing::ExpectDropoutMaskOfTheDropoutOp(
      [&](const AttentionDims& d, const AttentionInputs& in, const AttentionArgs& args,
          const Tensor& mask) { return RunOnGpu(gpu_, d, in, args, &mask).out; });
}

TEST_F(AttentionCudaTest, HeadDimsAboveTheKernelLimitAreUnimplemented) {
  const AttentionDims d{1, 1, 4, 4, 136};
  const AttentionInputs in = RandomAttentionInputs(d, DType::kBF16, 80);
  const Tensor q = ToDevice(in.q), k = ToDevice(in.k), v = ToDevice(in.v);
  Tensor out = EmptyDevice(d.QShape(), DType::kBF16), lse = EmptyDevice(d.LseShape(), DType::kF32);
  const absl::Status s =
      FusedAttention(gpu_, q.view(), k.view(), v.view(), MakeAttentionArgs(d, true, nullptr, 0.0f),
                     out.view(), lse.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("FusedAttention: head dim D = 136")) << s;
}

}  // namespace
}  // namespace ops
}  // namespace mt
