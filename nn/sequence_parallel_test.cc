// Sequence parallelism and selective activation recomputation in nn/ (run under mpirun; every rank
// is one TP rank, TP = world size). Every rank also builds the serial (TP = 1) stack from the same
// global parameter values (nn/parameter_testutil.h FillGlobal), then checks:
//   - a two-layer TransformerStack with sequence parallelism (pre-norm causal, as GPT-2; post-norm
//     bidirectional with a padding mask, as BERT), hidden and attention dropout on, with each of
//     Recompute kNo, kYes (full) and kSelective: this rank's slice of the output and of the input
//     gradient, and every gradient slice, equal the serial stack's within float32 rounding (the
//     dropout masks are keyed by global position, so they are the serial ones);
//   - the collectives per layer: forward 2 all-gathers and 2 reduce-scatters where the TP stack
//     without sequence parallelism does 2 all-reduces; backward 4 all-gathers (two of them gather
//     the branch inputs again: only the slices are stored), 2 reduce-scatters and 1 all-reduce (the
//     norms' gradients) where it does 2 all-reduces;
//   - the activations the layers hold: those of the sequence-parallel regions divided by TP;
//   - selective and full recomputation give bitwise the outputs and gradients of the stored path,
//     with and without sequence parallelism;
//   - sequence parallelism at TP = 1 is InvalidArgument.
#include "comm/sequence_parallel.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "comm/mpi_testutil.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "nn/parameter_testutil.h"
#include "nn/transformer.h"

namespace mt {
namespace nn {
namespace {

using ::mt::comm::testing::ExpectWithin;
using ::mt::comm::testing::MpiTest;
using ::mt::testing::MaxAbs;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using testing::ExpectGradientSlicesMatch;
using testing::FillGlobal;

using Vec = std::vector<double>;

constexpr int kLayers = 2;
const double kU = ::mt::testing::UnitRoundoff(DType::kF32);
// Sequence parallelism and TP change only the order of f32 sums (partial products over the ranks'
// heads and FFN columns, the norms' gradient sums over the ranks' positions): reductions of a few
// dozen terms through two layers, a few tens of unit roundoffs of the largest magnitude. A wrong
// slice, a missing reduction or a mask keyed by local position is off by O(1).
const double kTol = 128 * kU;

StepContext Context(const ExecContext* ec, comm::Communicator* tp) {
  return StepContext::Train(ec, tp, 99, 5, 3);
}

struct StackRun {
  Tensor y, dx;                 // This rank's [B, T / tp, H] with sequence parallelism.
  comm::CommCounters fwd, bwd;  // Collectives of sc.tp.
  int64_t held = 0;             // Activation bytes held between forward and backward.
  Tensor grads;                 // Flat f32 gradients.
};

// `full` [B, T, H] as this rank's slice with sequence parallelism, else itself (a copy).
Tensor Local(const StepContext& sc, bool sp, const Tensor& full) {
  const int parts = sp ? sc.tp_size() : 1;
  Shape shape = full.shape();
  shape[1] /= parts;
  Tensor part = Tensor::Host(shape, DType::kF32);
  const absl::Status s =
      comm::SplitSequence("test", full.view(), sp ? sc.tp_rank() : 0, parts, part.view());
  EXPECT_TRUE(s.ok()) << s;
  return part;
}

// Forward and backward of a kLayers stack of `spec` in `store` (filled by FillGlobal) on x with
// output gradient dy (both full [B, T, H]; sliced here with sequence parallelism).
void RunStack(const StepContext& sc, ParameterStore* store, const LayerSpec& spec,
              const Tensor& x_full, const TensorView* mask, const Tensor& dy_full, StackRun* out) {
  auto stack = TransformerStack::Create(store, "layers", kLayers, spec);
  ASSERT_TRUE(stack.ok()) << stack.status();
  ASSERT_TRUE(store->Allocate(1).ok());
  FillGlobal(store);
  const bool sp = spec.config.sequence_parallel;
  const Tensor x = Local(sc, sp, x_full), dy = Local(sc, sp, dy_full);
  out->dx = Tensor::Host(x.shape(), DType::kF32);
  if (sc.tp != nullptr) sc.tp->ResetCounters();
  auto y = (*stack)->Forward(sc, x.view(), mask);
  ASSERT_TRUE(y.ok()) << y.status();
  if (sc.tp != nullptr) out->fwd = sc.tp->ResetCounters();
  out->held = (*stack)->HeldActivationBytes();
  out->y = Tensor::Host(x.shape(), DType::kF32);
  std::memcpy(out->y.data(), y->data, out->y.nbytes());
  const absl::Status s = (*stack)->Backward(sc, dy.view(), out->dx.view());
  ASSERT_TRUE(s.ok()) << s;
  if (sc.tp != nullptr) out->bwd = sc.tp->ResetCounters();
  auto grads = store->CopyGradsToHost(*sc.exec);
  ASSERT_TRUE(grads.ok()) << grads.status();
  out->grads = std::move(grads).value();
}

void ExpectBitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.nbytes())) << what;
}

LayerSpec Spec(NormPosition norm, Recompute recompute, bool sp) {
  LayerSpec spec;
  spec.config.hidden = 16;
  spec.config.heads = 4;  // Heads, ffn divisible by TP 1, 2 and 4.
  spec.config.ffn = 24;
  spec.config.norm = norm;
  spec.config.causal =
      norm == NormPosition::kPreNorm ? ops::CausalMask::kYes : ops::CausalMask::kNo;
  spec.config.hidden_dropout = 0.2f;
  spec.config.attention_dropout = 0.3f;
  spec.config.recompute = recompute;
  spec.config.sequence_parallel = sp;
  return spec;
}

class SequenceParallelLayerTest : public MpiTest {};

TEST_F(SequenceParallelLayerTest, StackMatchesSerialWithCountedCollectives) {
  const int tp = comm_->size(), rank = comm_->rank();
  if (tp == 1) GTEST_SKIP() << "sequence parallelism needs TP > 1";
  ExecContext ec;
  const int64_t B = 2, T = 3 * tp, H = 16;
  const Tensor x = RandomTensor({B, T, H}, DType::kF32, 41, -1.5, 1.5);
  const Tensor dy = RandomTensor({B, T, H}, DType::kF32, 42);
  Tensor mask = Tensor::Host({B, T}, DType::kI32);
  for (int64_t i = 0; i < B * T; ++i) mask.data_as<int32_t>()[i] = i % T < T - 1 - i / T ? 1 : 0;
  for (NormPosition norm : {NormPosition::kPreNorm, NormPosition::kPostNorm}) {
    const TensorView mask_view = mask.view();
    const TensorView* m = norm == NormPosition::kPostNorm ? &mask_view : nullptr;
    const std::string pos = norm == NormPosition::kPreNorm ? "pre-norm" : "post-norm";
    ParameterStore serial(0, 1), plain_tp(rank, tp);
    StackRun s, t;
    RunStack(Context(&ec, nullptr), &serial, Spec(norm, Recompute::kNo, false), x, m, dy, &s);
    RunStack(Context(&ec, comm_.get()), &plain_tp, Spec(norm, Recompute::kNo, false), x, m, dy, &t);
    const Tensor want_y = Local(Context(&ec, comm_.get()), true, s.y);
    const Tensor want_dx = Local(Context(&ec, comm_.get()), true, s.dx);
    for (Recompute recompute : {Recompute::kNo, Recompute::kYes, Recompute::kSelective}) {
      const std::string what =
          absl::StrCat(pos, " tp=", tp, " rank=", rank, " recompute=", static_cast<int>(recompute));
      ParameterStore sharded(rank, tp);
      StackRun r;
      RunStack(Context(&ec, comm_.get()), &sharded, Spec(norm, recompute, true), x, m, dy, &r);
      const Vec wy = ToDoubles(want_y.view()), wdx = ToDoubles(want_dx.view());
      ExpectWithin(ToDoubles(r.y.view()), wy, Vec(wy.size(), kTol * MaxAbs(ToDoubles(s.y.view()))),
                   what + " output");
      ExpectWithin(ToDoubles(r.dx.view()), wdx,
                   Vec(wdx.size(), kTol * MaxAbs(ToDoubles(s.dx.view()))), what + " input grad");
      ExpectGradientSlicesMatch(serial, sharded, kTol, what);
      // The all-reduces of the TP stack, replaced one for one by all-gather + reduce-scatter.
      EXPECT_EQ(t.fwd.all_reduce, 2 * kLayers) << what;
      EXPECT_EQ(t.bwd.all_reduce, 2 * kLayers) << what;
      EXPECT_EQ(r.fwd.all_reduce, 0) << what;
      EXPECT_EQ(r.fwd.all_gather, t.fwd.all_reduce) << what;
      EXPECT_EQ(r.fwd.reduce_scatter, t.fwd.all_reduce) << what;
      // Backward: the gathers of the branch inputs (and of a full recomputation's forward) come
      // on top; one all-reduce of the norms' gradients per layer.
      const int64_t recomputed = recompute == Recompute::kYes ? 2 * kLayers : 0;
      EXPECT_EQ(r.bwd.all_gather, 2 * t.bwd.all_reduce + recomputed) << what;
      EXPECT_EQ(r.bwd.reduce_scatter, t.bwd.all_reduce + recomputed) << what;
      EXPECT_EQ(r.bwd.all_reduce, kLayers) << what;
      EXPECT_EQ(r.fwd.calls() + r.bwd.calls(), r.fwd.all_gather + r.fwd.reduce_scatter +
                                                   r.bwd.all_gather + r.bwd.reduce_scatter +
                                                   r.bwd.all_reduce)
          << what;
      if (recompute == Recompute::kNo) {
        // What the layers hold: the norms' and residual slices [B, T / tp, H] are divided by TP.
        EXPECT_LT(r.held, t.held) << what;
      }
    }
    EXPECT_GT(MaxAbs(ToDoubles(s.y.view())), 0.1) << pos;
  }
}

// Recomputation repeats the forward bit for bit (same masks, same inputs): the outputs and the
// gradients are those of the stored path, bitwise, with and without sequence parallelism.
TEST_F(SequenceParallelLayerTest, RecomputationIsBitwiseTheStoredPath) {
  const int tp = comm_->size(), rank = comm_->rank();
  ExecContext ec;
  const int64_t B = 2, T = 2 * tp, H = 16;
  const Tensor x = RandomTensor({B, T, H}, DType::kF32, 51, -1.5, 1.5);
  const Tensor dy = RandomTensor({B, T, H}, DType::kF32, 52);
  for (bool sp : {false, true}) {
    if (sp && tp == 1) continue;
    comm::Communicator* c = tp == 1 ? nullptr : comm_.get();
    for (NormPosition norm : {NormPosition::kPreNorm, NormPosition::kPostNorm}) {
      ParameterStore stored_store(rank, tp);
      StackRun stored;
      RunStack(Context(&ec, c), &stored_store, Spec(norm, Recompute::kNo, sp), x, nullptr, dy,
               &stored);
      for (Recompute recompute : {Recompute::kYes, Recompute::kSelective}) {
        const std::string what = absl::StrCat("sp=", sp, " norm=", static_cast<int>(norm),
                                              " recompute=", static_cast<int>(recompute));
        ParameterStore store(rank, tp);
        StackRun r;
        RunStack(Context(&ec, c), &store, Spec(norm, recompute, sp), x, nullptr, dy, &r);
        ExpectBitwise(r.y, stored.y, what + " output");
        ExpectBitwise(r.dx, stored.dx, what + " input gradient");
        ExpectBitwise(r.grads, stored.grads, what + " gradients");
        // Less held between forward and backward than the stored path.
        EXPECT_LT(r.held, stored.held) << what;
      }
    }
  }
}

TEST_F(SequenceParallelLayerTest, SequenceParallelNeedsTensorParallelism) {
  ParameterStore store(0, 1);
  auto layer = TransformerLayer::Create(&store, "layer", 0,
                                        Spec(NormPosition::kPreNorm, Recompute::kNo, true));
  EXPECT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument) << layer.status();
  EXPECT_NE(layer.status().message().find("sequence parallelism"), std::string::npos)
      << layer.status();
}

}  // namespace
}  // namespace nn
}  // namespace mt
