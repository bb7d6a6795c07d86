// Ring attention (nn/context_parallel.h) under mpirun, CP = world size: every rank draws the same
// whole-sequence q, k, v and output gradient, runs the fused attention over the whole sequence (the
// serial answer), and checks that the ring over its two chunks gives the serial output,
// log-sum-exp and gradients of its chunks within float32 rounding; causal with grouped-query
// attention (2 key/value groups for 4 heads), bidirectional with a padding mask of the whole
// sequence, both with dropout on the probabilities, and the exchange without overlap. The dropout
// keys of a rank's chunks are those of the whole activation.
#include "nn/context_parallel.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/mpi_testutil.h"
#include "core/ops/attention.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace nn {
namespace {

using ::mt::comm::testing::MpiTest;
using ::mt::testing::MaxAbs;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;

// Chunk-major [2B, X, c, D] of this rank's chunks of a whole [B, X, T, D] (f32, host).
Tensor ChunkMajor(const StepContext& sc, const Tensor& whole) {
  const int64_t B = whole.shape()[0], X = whole.shape()[1], T = whole.shape()[2];
  const int64_t D = whole.shape()[3], c = T / (2 * sc.cp_size());
  Tensor local = Tensor::Host({2 * B, X, c, D}, DType::kF32);
  const float* w = whole.data_as<float>();
  float* l = local.data_as<float>();
  for (int h = 0; h < 2; ++h) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t x = 0; x < X; ++x) {
        for (int64_t t = 0; t < c; ++t) {
          const float* src = w + ((b * X + x) * T + CpChunk(sc, h) * c + t) * D;
          float* dst = l + (((h * B + b) * X + x) * c + t) * D;
          for (int64_t d = 0; d < D; ++d) dst[d] = src[d];
        }
      }
    }
  }
  return local;
}

// Rows [k B, (k + 1) B) = the mask of chunk k: i32 [2C B, c] from [B, T].
Tensor MaskChunks(const Tensor& mask, int C) {
  const int64_t B = mask.shape()[0], T = mask.shape()[1], c = T / (2 * C);
  Tensor out = Tensor::Host({2 * C * B, c}, DType::kI32);
  for (int64_t k = 0; k < 2 * C; ++k) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < c; ++t) {
        out.data_as<int32_t>()[(k * B + b) * c + t] = mask.data_as<int32_t>()[b * T + k * c + t];
      }
    }
  }
  return out;
}

void ExpectClose(const Tensor& got, const Tensor& want, const char* what) {
  const std::vector<double> g = ToDoubles(got.view()), w = ToDoubles(want.view());
  ASSERT_EQ(g.size(), w.size()) << what;
  // The ring sums the same terms as the fused op in another order (per chunk, then merged or
  // added): a few tens of f32 roundings of the largest magnitude.
  const double tol = 256 * ::mt::testing::UnitRoundoff(DType::kF32) * MaxAbs(w);
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol) << what << " " << i;
}

void CheckRing(comm::Communicator& cp, bool causal, float dropout = 0) {
  const ExecContext ec;
  StepContext sc = StepContext::Train(&ec);
  sc.cp = &cp;
  const int C = cp.size();
  const int64_t B = 2, NH = 4, G = 2, D = 8, c = 3, T = 2 * C * c;
  const Tensor q = RandomTensor({B, NH, T, D}, DType::kF32, 1, -1.5, 1.5);
  const Tensor k = RandomTensor({B, G, T, D}, DType::kF32, 2, -1.5, 1.5);
  const Tensor v = RandomTensor({B, G, T, D}, DType::kF32, 3);
  const Tensor dout = RandomTensor({B, NH, T, D}, DType::kF32, 4);
  Tensor mask = Tensor::Host({B, T}, DType::kI32);
  for (int64_t i = 0; i < B * T; ++i) mask.data_as<int32_t>()[i] = (i * 7) % 5 != 3 ? 1 : 0;
  const Tensor mask_chunks = MaskChunks(mask, C);
  ops::AttentionArgs whole_args, ring_args;
  whole_args.scale = ring_args.scale = 1.0f / std::sqrt(static_cast<float>(D));
  whole_args.causal = ring_args.causal = causal ? ops::CausalMask::kYes : ops::CausalMask::kNo;
  if (!causal) {
    whole_args.padding_mask = &mask.view();
    ring_args.padding_mask = &mask_chunks.view();
  }
  if (dropout > 0) {
    // Keyed as a tensor-parallel rank keys its heads: samples from 5 of a batch whose rows hold
    // 3x these heads' probabilities (ParallelSelfAttention::ProbsDropout).
    ops::DropoutArgs d;
    d.p = dropout;
    d.seed = 11;
    d.stream = 7;
    d.key_inner = NH * T * T;
    d.key_outer_stride = 3 * NH * T * T;
    d.key_base = 5 * d.key_outer_stride + NH * T * T;
    whole_args.dropout = ring_args.dropout = d;
  }
  Tensor out = Tensor::Host({B, NH, T, D}, DType::kF32),
         lse = Tensor::Host({B, NH, T}, DType::kF32);
  Tensor dq = Tensor::Host(q.shape(), DType::kF32), dk = Tensor::Host(k.shape(), DType::kF32);
  Tensor dv = Tensor::Host(k.shape(), DType::kF32);
  ASSERT_TRUE(
      ops::FusedAttention(ec, q.view(), k.view(), v.view(), whole_args, out.view(), lse.view())
          .ok());
  ASSERT_TRUE(ops::FusedAttentionBackward(ec, q.view(), k.view(), v.view(), out.view(), dout.view(),
                                          lse.view(), whole_args, dq.view(), dk.view(), dv.view())
                  .ok());
  const Tensor lq = ChunkMajor(sc, q), lk = ChunkMajor(sc, k), lv = ChunkMajor(sc, v);
  const Tensor ldout = ChunkMajor(sc, dout);
  for (bool overlap : {true, false}) {
    sc.cp_overlap = overlap;
    Tensor rout = Tensor::Host(lq.shape(), DType::kF32);
    Tensor rlse = Tensor::Host({2 * B, NH, c}, DType::kF32);
    Tensor rdq = Tensor::Host(lq.shape(), DType::kF32), rdk = Tensor::Host(lk.shape(), DType::kF32);
    Tensor rdv = Tensor::Host(lk.shape(), DType::kF32);
    ASSERT_TRUE(RingAttentionForward(sc, lq.view(), lk.view(), lv.view(), ring_args, rout.view(),
                                     rlse.view())
                    .ok());
    ASSERT_TRUE(RingAttentionBackward(sc, lq.view(), lk.view(), lv.view(), rout.view(),
                                      ldout.view(), rlse.view(), ring_args, rdq.view(), rdk.view(),
                                      rdv.view())
                    .ok());
    ExpectClose(rout, ChunkMajor(sc, out), "out");
    Tensor lse4 = Tensor::Host({B, NH, T, 1}, DType::kF32);
    std::copy(lse.data_as<float>(), lse.data_as<float>() + lse.numel(), lse4.data_as<float>());
    const Tensor want_lse = ChunkMajor(sc, lse4);
    ExpectClose(rlse, want_lse, "lse");
    ExpectClose(rdq, ChunkMajor(sc, dq), "dq");
    ExpectClose(rdk, ChunkMajor(sc, dk), "dk");
    ExpectClose(rdv, ChunkMajor(sc, dv), "dv");
  }
}

TEST_F(MpiTest, RingAttentionCausalWithGroupsEqualsWholeSequence) { CheckRing(*comm_, true); }

TEST_F(MpiTest, RingAttentionBidirectionalWithPaddingEqualsWholeSequence) {
  CheckRing(*comm_, false);
}

// Dropout on the probabilities: each block's elements keyed by their place in the whole
// sequence's probabilities, so the masks and results are the whole sequence's.
TEST_F(MpiTest, RingAttentionWithProbabilityDropoutEqualsWholeSequence) {
  CheckRing(*comm_, true, 0.3f);
  CheckRing(*comm_, false, 0.3f);
}

// The chunks' dropout keys are the whole activation's: element (b, t, x) of half h has the key of
// (b, CpChunk(h) c + t, x) in the whole [B, T, X].
TEST_F(MpiTest, ChunkDropoutKeysAreTheWholeActivationKeys) {
  const ExecContext ec;
  StepContext sc = StepContext::Train(&ec, nullptr, 5, 3, /*sample_offset=*/6);
  sc.cp = comm_.get();
  const int64_t B = 2, c = 3, X = 4, T = 2 * sc.cp_size() * c;
  const ops::DropoutArgs whole = sc.Dropout(0.5f, 1, 2, T * X);
  for (int h = 0; h < 2; ++h) {
    const ops::DropoutArgs d = CpChunkDropout(sc, whole, c, X, h);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < c; ++t) {
        for (int64_t x = 0; x < X; ++x) {
          const int64_t local = (b * c + t) * X + x;
          const int64_t global = (b * T + CpChunk(sc, h) * c + t) * X + x;
          ASSERT_EQ(ops::DropoutKey(d, local), ops::DropoutKey(whole, global)) << h << b << t;
        }
      }
    }
  }
}

}  // namespace
}  // namespace nn
}  // namespace mt
