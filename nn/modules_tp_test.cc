// Tensor-parallel invariance of the nn/ modules (run under mpirun; every rank is one TP rank, TP =
// world size). Every rank also builds the serial (TP = 1) module from the same global parameter
// values, then checks that the TP module gives the serial outputs, input gradients and (sliced)
// parameter gradients within float32 rounding:
//   - ColumnParallelLinear -> GeLU -> RowParallelLinear (the MLP pattern): one all-reduce forward
//     (g) and one backward (f);
//   - ParallelSelfAttention (causal, and bidirectional with a padding mask): heads split across
//     the ranks, one all-reduce each way;
//   - ParallelSelfAttention with attention-probability dropout p > 0: the TP output equals the
//     serial output with the same seed and micro_step (the mask is keyed by global indices);
//   - a TransformerLayer of the modern-decoder spec (RMSNorm, rotary embeddings, SwiGLU): two
//     all-reduces each way.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_testutil.h"
#include "core/ops/elementwise.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/attention.h"
#include "nn/context.h"
#include "nn/linear.h"
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

const double kU = ::mt::testing::UnitRoundoff(DType::kF32);
// TP changes only the order of f32 sums (partial products over the ranks' slices, then the
// all-reduce), by reductions of at most a few dozen terms: a few tens of unit roundoffs of the
// largest magnitude. A wrong slice, a missing all-reduce or a bias added tp times is off by O(1).
const double kTpTol = 128 * kU;  // ~7.6e-6, relative to the largest magnitude.

Vec Bound(const Vec& expected) { return Vec(expected.size(), kTpTol * MaxAbs(expected)); }

StepContext Context(const ExecContext* ec, comm::Communicator* tp) {
  return StepContext::Train(ec, tp, 1234, 3, 2);
}

struct Outputs {
  Vec y, dx;
  int64_t forward_all_reduces = 0, backward_all_reduces = 0, other_collectives = 0;
};

// Counts the collectives of sc.tp since the last call (none for TP = 1).
void Count(const StepContext& sc, int64_t* all_reduces, int64_t* others) {
  if (sc.tp == nullptr) return;
  const comm::CommCounters c = sc.tp->ResetCounters();
  *all_reduces = c.all_reduce;
  *others += c.calls() - c.all_reduce;
}

// The TP run `t` gives the serial run `s`'s output, input gradient and gradient slices (of the
// stores `serial` and `sharded`), with `all_reduces` all-reduces each way and no other collective.
void ExpectMatchesSerial(const ParameterStore& serial, const ParameterStore& sharded,
                         const Outputs& s, const Outputs& t, int64_t all_reduces,
                         const std::string& what) {
  ExpectWithin(t.y, s.y, Bound(s.y), what + " output");
  ExpectWithin(t.dx, s.dx, Bound(s.dx), what + " input gradient");
  ExpectGradientSlicesMatch(serial, sharded, kTpTol, what);
  EXPECT_GT(MaxAbs(s.y), 0.1) << what;
  EXPECT_EQ(t.forward_all_reduces, all_reduces) << what;
  EXPECT_EQ(t.backward_all_reduces, all_reduces) << what;
  EXPECT_EQ(t.other_collectives, 0) << what;
}

// y [N, H] = Row(GeLU(Column(x))), then its backward with dy; parameters declared in `store`,
// filled by FillGlobal.
void RunLinearPair(const StepContext& sc, ParameterStore* store, int64_t H, int64_t F,
                   const Tensor& x, const Tensor& dy, Outputs* out) {
  const int64_t N = x.shape()[0];
  auto col = ColumnParallelLinear::Create(store, "fc1", H, F, Bias::kYes, 0.02);
  ASSERT_TRUE(col.ok()) << col.status();
  auto row = RowParallelLinear::Create(store, "fc2", F, H, Bias::kYes, 0.02);
  ASSERT_TRUE(row.ok()) << row.status();
  ASSERT_TRUE(store->Allocate(1).ok());
  FillGlobal(store);
  const int64_t local_f = F / sc.tp_size();
  ASSERT_EQ(col->local_out(), local_f);
  ASSERT_EQ(row->local_in(), local_f);
  Tensor pre = Tensor::Host({N, local_f}, DType::kF32),
         act = Tensor::Host({N, local_f}, DType::kF32);
  Tensor y = Tensor::Host({N, H}, DType::kF32), dx = Tensor::Host({N, H}, DType::kF32);
  if (sc.tp != nullptr) sc.tp->ResetCounters();
  ASSERT_TRUE(col->Forward(sc, x.view(), pre.view()).ok());
  ASSERT_TRUE(ops::Gelu(*sc.exec, pre.view(), act.view()).ok());
  ASSERT_TRUE(row->Forward(sc, act.view(), y.view()).ok());
  Count(sc, &out->forward_all_reduces, &out->other_collectives);
  Tensor dact = Tensor::Host({N, local_f}, DType::kF32);
  ASSERT_TRUE(row->Backward(sc, act.view(), dy.view(), dact.view()).ok());
  ASSERT_TRUE(ops::GeluBackward(*sc.exec, pre.view(), dact.view(), dact.view()).ok());
  ASSERT_TRUE(col->Backward(sc, x.view(), dact.view(), dx.view()).ok());
  Count(sc, &out->backward_all_reduces, &out->other_collectives);
  out->y = ToDoubles(y.view());
  out->dx = ToDoubles(dx.view());
}

// Forward and backward of a [B, T, H] -> [B, T, H] block that make(store) declares in `store`
// (returning a StatusOr of a pointer to it); parameters filled by FillGlobal.
template <typename Make>
void RunBlock(const StepContext& sc, ParameterStore* store, const Make& make, const Tensor& x,
              const TensorView* mask, const Tensor& dy, Outputs* out) {
  auto block = make(store);
  ASSERT_TRUE(block.ok()) << block.status();
  ASSERT_TRUE(store->Allocate(1).ok());
  FillGlobal(store);
  Tensor y = Tensor::Host(x.shape(), DType::kF32), dx = Tensor::Host(x.shape(), DType::kF32);
  if (sc.tp != nullptr) sc.tp->ResetCounters();
  absl::Status s = (*block)->Forward(sc, x.view(), mask, y.view());
  ASSERT_TRUE(s.ok()) << s;
  Count(sc, &out->forward_all_reduces, &out->other_collectives);
  s = (*block)->Backward(sc, dy.view(), dx.view());
  ASSERT_TRUE(s.ok()) << s;
  Count(sc, &out->backward_all_reduces, &out->other_collectives);
  out->y = ToDoubles(y.view());
  out->dx = ToDoubles(dx.view());
}

// Attention forward and backward; parameters declared in `store`, filled by FillGlobal.
void RunAttention(const StepContext& sc, ParameterStore* store, const AttentionConfig& ac,
                  const Tensor& x, const TensorView* mask, const Tensor& dy, Outputs* out) {
  using Made = absl::StatusOr<std::unique_ptr<ParallelSelfAttention>>;
  const auto make = [&](ParameterStore* s) -> Made {
    ASSIGN_OR_RETURN(ParallelSelfAttention attn, ParallelSelfAttention::Create(s, "attn", ac));
    return std::make_unique<ParallelSelfAttention>(std::move(attn));
  };
  RunBlock(sc, store, make, x, mask, dy, out);
}

TEST_F(MpiTest, ColumnThenRowParallelLinearMatchesSerial) {
  const int tp = comm_->size(), rank = comm_->rank();
  ExecContext ec;
  for (const auto& size : std::vector<std::pair<int64_t, int64_t>>{{5, 12}, {1, 4}, {7, 3}}) {
    const int64_t N = size.first, H = size.second, F = 4 * 3;  // F divisible by TP 1, 2, 4.
    SCOPED_TRACE(::testing::Message() << "tp=" << tp << " rank=" << rank << " N=" << N);
    // Same inputs on every rank (fixed seeds), as the replicated activations of a TP group.
    const Tensor x = RandomTensor({N, H}, DType::kF32, 11, -2, 2);
    const Tensor dy = RandomTensor({N, H}, DType::kF32, 12);
    ParameterStore serial(0, 1), sharded(rank, tp);
    Outputs s, t;
    RunLinearPair(Context(&ec, nullptr), &serial, H, F, x, dy, &s);
    RunLinearPair(Context(&ec, comm_.get()), &sharded, H, F, x, dy, &t);
    // g forward, f backward: one all-reduce each way, nothing else.
    ExpectMatchesSerial(serial, sharded, s, t, 1, "linear pair");
  }
}

struct AttentionCase {
  int64_t B, T, H, heads;
  ops::CausalMask causal;
  bool padded;
  float dropout;
};

// Padding masks with some padded keys in every sample but never all of them.
Tensor PaddingMask(int64_t B, int64_t T) {
  Tensor mask = Tensor::Host({B, T}, DType::kI32);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) mask.data_as<int32_t>()[b * T + t] = t < T - 1 - b % 2 ? 1 : 0;
  }
  return mask;
}

void CheckAttentionMatchesSerial(comm::Communicator* comm, const AttentionCase& c) {
  const int tp = comm->size(), rank = comm->rank();
  SCOPED_TRACE(::testing::Message() << "tp=" << tp << " rank=" << rank << " B=" << c.B << " T="
                                    << c.T << " padded=" << c.padded << " dropout=" << c.dropout);
  ExecContext ec;
  AttentionConfig ac;
  ac.hidden = c.H;
  ac.heads = c.heads;
  ac.causal = c.causal;
  ac.dropout = c.dropout;
  ac.layer_index = 1;
  const Tensor x = RandomTensor({c.B, c.T, c.H}, DType::kF32, 21, -1.5, 1.5);
  const Tensor dy = RandomTensor({c.B, c.T, c.H}, DType::kF32, 22);
  const Tensor mask = PaddingMask(c.B, c.T);
  const TensorView mask_view = mask.view();
  const TensorView* m = c.padded ? &mask_view : nullptr;
  ParameterStore serial(0, 1), sharded(rank, tp);
  Outputs s, t;
  RunAttention(Context(&ec, nullptr), &serial, ac, x, m, dy, &s);
  RunAttention(Context(&ec, comm), &sharded, ac, x, m, dy, &t);
  ExpectMatchesSerial(serial, sharded, s, t, 1, "attention");

  if (c.dropout > 0) {
    // Not vacuous: the serial output depends on the mask (differs from evaluation mode, where
    // dropout is off, and from another micro-step's mask) far beyond the tolerance.
    for (int variant = 0; variant < 2; ++variant) {
      StepContext sc = Context(&ec, nullptr);
      if (variant == 0) sc.mode = Mode::kEval;
      if (variant == 1) sc.micro_step = 4;
      ParameterStore other(0, 1);
      Outputs o;
      RunAttention(sc, &other, ac, x, m, dy, &o);
      double diff = 0;
      for (size_t i = 0; i < o.y.size(); ++i) diff = std::max(diff, std::fabs(o.y[i] - s.y[i]));
      EXPECT_GT(diff, 1e3 * kTpTol * MaxAbs(s.y)) << (variant == 0 ? "eval mode" : "micro_step 4");
    }
  }
}

TEST_F(MpiTest, ParallelSelfAttentionMatchesSerial) {
  // Heads divisible by TP 1, 2 and 4; odd head dim, sequence lengths and batch.
  for (const AttentionCase& c : {AttentionCase{2, 5, 12, 4, ops::CausalMask::kYes, false, 0.0f},
                                 AttentionCase{3, 4, 20, 4, ops::CausalMask::kNo, true, 0.0f},
                                 AttentionCase{1, 1, 4, 4, ops::CausalMask::kYes, false, 0.0f}}) {
    CheckAttentionMatchesSerial(comm_.get(), c);
  }
}

TEST_F(MpiTest, AttentionDropoutMaskIsTensorParallelInvariant) {
  for (const AttentionCase& c : {AttentionCase{2, 5, 12, 4, ops::CausalMask::kYes, false, 0.3f},
                                 AttentionCase{3, 6, 8, 4, ops::CausalMask::kNo, true, 0.5f}}) {
    CheckAttentionMatchesSerial(comm_.get(), c);
  }
}

// A TransformerLayer of the modern-decoder spec (RMSNorm, rotary attention without biases, SwiGLU
// MLP) with hidden and attention dropout: the TP layer gives the serial layer's output, input
// gradient and gradient slices, with exactly two all-reduces forward and two backward (the
// SwiGLU MLP sums its gate and up input gradients before its one f all-reduce).
TEST_F(MpiTest, ModernTransformerLayerMatchesSerial) {
  const int tp = comm_->size(), rank = comm_->rank();
  ExecContext ec;
  const int64_t B = 2, T = 5, H = 16;
  LayerSpec spec;
  spec.config.hidden = H;
  spec.config.heads = 4;  // Head dim 4; heads and ffn divisible by TP 1, 2 and 4.
  spec.config.ffn = 12;
  spec.config.hidden_dropout = 0.2f;
  spec.config.attention_dropout = 0.3f;
  spec.config.rotary_base = 10000.0;
  spec.config.attention_bias = Bias::kNo;
  spec.norm = RmsNormFactory();
  spec.mlp = SwiGluMlpFactory();
  const Tensor x = RandomTensor({B, T, H}, DType::kF32, 31, -1.5, 1.5);
  const Tensor dy = RandomTensor({B, T, H}, DType::kF32, 32);
  const auto make = [&](ParameterStore* s) {
    return TransformerLayer::Create(s, "layer", 1, spec);
  };
  for (NormPosition norm : {NormPosition::kPreNorm, NormPosition::kPostNorm}) {
    SCOPED_TRACE(::testing::Message() << "tp=" << tp << " rank=" << rank
                                      << (norm == NormPosition::kPreNorm ? " pre" : " post"));
    spec.config.norm = norm;
    ParameterStore serial(0, 1), sharded(rank, tp);
    Outputs s, t;
    RunBlock(Context(&ec, nullptr), &serial, make, x, nullptr, dy, &s);
    RunBlock(Context(&ec, comm_.get()), &sharded, make, x, nullptr, dy, &t);
    EXPECT_EQ(serial.size(), 7);  // ln1, qkv, proj, ln2, gate, up, down.
    ExpectMatchesSerial(serial, sharded, s, t, 2, "modern layer");
  }
}

}  // namespace
}  // namespace nn
}  // namespace mt
