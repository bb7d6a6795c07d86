// Every op dispatches CUDA tensors to the CUDA backend: without a device (or without CUDA, where
// the backend is the stub core/cuda/ops_cuda_stub.cc) the call is Unimplemented and names the op
// and the device; with a device, views that claim cuda:0 but hold host memory are refused
// (InvalidArgument) before any kernel runs, and the ops that need a DeviceContext say so
// (FailedPrecondition). The views here are never dereferenced.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "core/ops/adam.h"
#include "core/ops/attention.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/heads.h"
#include "core/ops/layernorm.h"
#include "core/ops/reduce.h"
#include "core/ops/sharded_cross_entropy.h"
#include "core/ops/softmax.h"
#include "core/ops/tanh.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::string op;
  bool needs_device_context;
  std::function<absl::Status(const ExecContext&)> run;
};

// Host tensors whose views are labelled cuda:0.
class FakeCuda {
 public:
  TensorView Make(Shape shape, DType dtype) {
    owned_.push_back(std::make_unique<Tensor>(Tensor::Zeros(shape, dtype)));
    TensorView v = owned_.back()->view();
    v.device = Device::Cuda(0);
    return v;
  }

 private:
  std::vector<std::unique_ptr<Tensor>> owned_;
};

template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

std::vector<Case> AllOps(FakeCuda& f) {
  const DType F = DType::kF32;
  const TensorView x = f.Make({3, 4}, F), y = f.Make({3, 4}, F), z = f.Make({3, 4}, F),
                   w = f.Make({3, 4}, F);
  const TensorView bias = f.Make({4}, F), beta = f.Make({4}, F);
  const TensorView half = f.Make({3, 4}, DType::kBF16);
  const TensorView stats = f.Make({3}, F), stats2 = f.Make({3}, F);
  const TensorView ids = f.Make({3}, DType::kI32), table = f.Make({5, 4}, F);
  const TensorView logits = f.Make({3, 4}, F), losses = f.Make({3}, F), pairs = f.Make({3, 2}, F);
  const TensorView qkv = f.Make({1, 2, 2, 3, 2}, F), q = f.Make({1, 2, 2, 2}, F),
                   k = f.Make({1, 2, 2, 2}, F), v = f.Make({1, 2, 2, 2}, F);
  const TensorView a3 = f.Make({2, 3, 4}, F), b3 = f.Make({2, 4, 5}, F), c3 = f.Make({2, 3, 5}, F);
  // Fused attention: q, k, v above are [B, NH, T, D] = [1, 2, 2, 2].
  const TensorView att_out = f.Make({1, 2, 2, 2}, F), att_dout = f.Make({1, 2, 2, 2}, F),
                   att_lse = f.Make({1, 2, 2}, F), att_dq = f.Make({1, 2, 2, 2}, F),
                   att_dk = f.Make({1, 2, 2, 2}, F), att_dv = f.Make({1, 2, 2, 2}, F);
  const TensorView b2 = f.Make({4, 5}, F), c2 = f.Make({3, 5}, F);
  DropoutArgs drop;
  drop.p = 0.5f;
  const HeadsShape hs{1, 2, 2, 2};
  const VocabShard shard{0, 4};
  return {
      {"BiasAdd", false, [=](auto& c) { return BiasAdd(c, x, bias, y); }},
      {"BiasGrad", true, [=](auto& c) { return BiasGrad(c, x, bias); }},
      {"Gelu", false, [=](auto& c) { return Gelu(c, x, y); }},
      {"GeluBackward", false, [=](auto& c) { return GeluBackward(c, x, y, z); }},
      {"Add", false, [=](auto& c) { return Add(c, x, y, z); }},
      {"Scale", false, [=](auto& c) { return Scale(c, x, 2.0f, y); }},
      {"Convert", false, [=](auto& c) { return Convert(c, x, half); }},
      {"Fill", false, [=](auto& c) { return Fill(c, x, 1.5); }},
      {"Dropout", false, [=](auto& c) { return Dropout(c, x, drop, y); }},
      {"DropoutBackward", false, [=](auto& c) { return DropoutBackward(c, x, drop, y); }},
      {"BiasDropoutAdd", false, [=](auto& c) { return BiasDropoutAdd(c, x, &bias, drop, y, z); }},
      {"Tanh", false, [=](auto& c) { return Tanh(c, x, y); }},
      {"TanhBackward", false, [=](auto& c) { return TanhBackward(c, x, y, z); }},
      {"LayerNorm", false,
       [=](auto& c) { return LayerNorm(c, x, bias, beta, 1e-5f, y, stats, stats2); }},
      {"LayerNormBackward", true,
       [=](auto& c) { return LayerNormBackward(c, x, bias, stats, stats2, y, z, beta, bias); }},
      {"Softmax", false, [=](auto& c) { return Softmax(c, x, y); }},
      {"SoftmaxBackward", false, [=](auto& c) { return SoftmaxBackward(c, x, y, z); }},
      {"Embedding", true, [=](auto& c) { return Embedding(c, ids, table, x); }},
      {"EmbeddingBackward", true, [=](auto& c) { return EmbeddingBackward(c, ids, x, table); }},
      {"CrossEntropy", true, [=](auto& c) { return CrossEntropy(c, logits, ids, losses); }},
      {"CrossEntropyBackward", true,
       [=](auto& c) { return CrossEntropyBackward(c, logits, ids, losses, y); }},
      {"ShardedRowMax", false, [=](auto& c) { return ShardedRowMax(c, logits, shard, losses); }},
      {"ShardedTargetAndSumExp", true,
       [=](auto& c) { return ShardedTargetAndSumExp(c, logits, ids, shard, losses, pairs); }},
      {"ShardedLoss", false, [=](auto& c) { return ShardedLoss(c, ids, stats, pairs, losses); }},
      {"ShardedCrossEntropyBackward", true,
       [=](auto& c) {
         return ShardedCrossEntropyBackward(c, logits, ids, shard, stats, pairs, losses, y);
       }},
      {"SplitQkv", false, [=](auto& c) { return SplitQkv(c, hs, qkv, q, k, v); }},
      {"MergeQkv", false, [=](auto& c) { return MergeQkv(c, hs, q, k, v, qkv); }},
      {"MergeHeads", false, [=](auto& c) { return MergeHeads(c, hs, q, k); }},
      {"SplitHeads", false, [=](auto& c) { return SplitHeads(c, hs, k, q); }},
      {"Sum", true, [=](auto& c) { return StatusOf(Sum(c, x)); }},
      {"Max", true, [=](auto& c) { return StatusOf(Max(c, x)); }},
      {"SumOfSquares", true, [=](auto& c) { return StatusOf(SumOfSquares(c, x)); }},
      {"L2Norm", true, [=](auto& c) { return StatusOf(L2Norm(c, x)); }},
      {"AdamUpdate", false, [=](auto& c) { return AdamUpdate(c, x, y, z, w, AdamArgs{}); }},
      {"Gemm", true, [=](auto& c) { return Gemm(c, x, b2, c2); }},
      {"BatchedGemm", true, [=](auto& c) { return BatchedGemm(c, a3, b3, c3); }},
      {"FusedAttention", false,
       [=](auto& c) { return FusedAttention(c, q, k, v, AttentionArgs{}, att_out, att_lse); }},
      {"FusedAttentionBackward", false,
       [=](auto& c) {
         return FusedAttentionBackward(c, q, k, v, att_out, att_dout, att_lse, AttentionArgs{},
                                       att_dq, att_dk, att_dv);
       }},
  };
}

TEST(CudaDispatchTest, EveryOpReachesTheCudaBackend) {
  FakeCuda fake;
  std::unique_ptr<cuda::DeviceContext> dc;
  ExecContext with_dc;
  if (cuda::DeviceCount() > 0) {
    absl::StatusOr<std::unique_ptr<cuda::DeviceContext>> made = cuda::DeviceContext::Create(0);
    ASSERT_TRUE(made.ok()) << made.status();
    dc = std::move(made).value();
    with_dc.cuda = dc.get();
  }
  for (const Case& c : AllOps(fake)) {
    SCOPED_TRACE(c.op);
    if (cuda::DeviceCount() == 0) {
      const absl::Status s = c.run(ExecContext{});
      EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.op + ": not implemented for cuda:0"));
      if (cuda::BuiltWithCuda()) {
        // The CUDA branch was taken and says why it cannot run here.
        EXPECT_THAT(std::string(s.message()), HasSubstr("cuda:0 here: no CUDA device")) << s;
      } else {
        // The CUDA branch was taken too: the stub backend (core/cuda/ops_cuda_stub.cc) answered.
        EXPECT_THAT(std::string(s.message()),
                    HasSubstr("cuda:0: this binary was built without the CUDA backend"))
            << s;
      }
      continue;
    }
    // A GPU is present: host memory labelled cuda:0 is refused before any kernel runs.
    absl::Status s = c.run(with_dc);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("points to host memory")) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.op + ": ")) << s;
    if (c.needs_device_context) {
      s = c.run(ExecContext{});
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("need ctx.cuda")) << s;
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
