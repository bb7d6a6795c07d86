#include "nn/context_parallel.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/attention_merge.h"
#include "core/status.h"

namespace mt {
namespace nn {

int64_t CpChunk(const StepContext& sc, int half) {
  return half == 0 ? sc.cp_rank() : 2 * sc.cp_size() - 1 - sc.cp_rank();
}

TensorView CpHalf(const TensorView& t, int half) {
  const int64_t n = t.dim(0) / 2;
  return t.Slice(half * n, (half + 1) * n);
}

ops::DropoutArgs CpChunkDropout(const StepContext& sc, const ops::DropoutArgs& whole,
                                int64_t chunk_len, int64_t width, int half, int tp_slice) {
  const int64_t T = chunk_len * 2 * sc.cp_size();
  int64_t start = CpChunk(sc, half) * chunk_len, len = chunk_len;
  if (tp_slice >= 0) {
    len = chunk_len / sc.tp_size();
    start += tp_slice * len;
  }
  ops::DropoutArgs d = whole;
  d.key_base = whole.key_base + start * width;
  d.key_inner = len * width;
  d.key_outer_stride = T * width;
  return d;
}

namespace {

constexpr int kKeyTag = 0, kValueTag = 1, kKeyGradTag = 2, kValueGradTag = 3;

// The key chunk of key half `kh` that rank `src`'s blocks hold.
int64_t KvChunk(int C, int64_t src, int kh) { return kh == 0 ? src : 2 * C - 1 - src; }

// One (query half, key half) block of a ring step and the mask within it.
struct Block {
  int qh, kh;
  ops::CausalMask mask;
};

// The blocks to compute with rank src's keys: causal attention skips key chunks after the query
// chunk and masks the diagonal chunk; bidirectional attention computes all four.
std::vector<Block> StepBlocks(const StepContext& sc, int64_t src, ops::CausalMask causal) {
  std::vector<Block> blocks;
  for (int qh = 0; qh < 2; ++qh) {
    for (int kh = 0; kh < 2; ++kh) {
      const int64_t a = CpChunk(sc, qh), b = KvChunk(sc.cp_size(), src, kh);
      if (causal == ops::CausalMask::kNo) {
        blocks.push_back({qh, kh, ops::CausalMask::kNo});
      } else if (b < a) {
        blocks.push_back({qh, kh, ops::CausalMask::kNo});
      } else if (b == a) {
        blocks.push_back({qh, kh, ops::CausalMask::kYes});
      }
    }
  }
  return blocks;
}

// The fused op's args for a block whose keys are chunk kv_chunk: its mask, and the padding mask's
// rows of that chunk (into *mask).
ops::AttentionArgs BlockArgs(const ops::AttentionArgs& args, const Block& blk, int64_t kv_chunk,
                             int64_t B, TensorView* mask) {
  ops::AttentionArgs a = args;
  a.causal = blk.mask;
  if (args.padding_mask != nullptr) {
    *mask = args.padding_mask->Slice(kv_chunk * B, (kv_chunk + 1) * B);
    a.padding_mask = mask;
  }
  return a;
}

// The exchange of one ring step: a pair of tensors sent to the next rank while the previous
// rank's pair arrives. Destroying it waits for what is still in flight.
class RingExchange {
 public:
  absl::Status Start(const StepContext& sc, const TensorView& a, const TensorView& b,
                     const TensorView& into_a, const TensorView& into_b, int tag_a, int tag_b) {
    comm::Communicator& cp = *sc.cp;
    const int next = (cp.rank() + 1) % cp.size(), prev = (cp.rank() + cp.size() - 1) % cp.size();
    for (auto [t, tag] : {std::pair<TensorView, int>{into_a, tag_a}, {into_b, tag_b}}) {
      ASSIGN_OR_RETURN(std::unique_ptr<comm::CommRequest> r, cp.RecvAsync(t, prev, tag));
      requests_.push_back(std::move(r));
    }
    for (auto [t, tag] : {std::pair<TensorView, int>{a, tag_a}, {b, tag_b}}) {
      ASSIGN_OR_RETURN(std::unique_ptr<comm::CommRequest> r, cp.SendAsync(t, next, tag));
      requests_.push_back(std::move(r));
    }
    return absl::OkStatus();
  }
  absl::Status Wait() {
    absl::Status first;
    for (auto& r : requests_) first.Update(r->Wait());
    requests_.clear();
    return first;
  }

 private:
  std::vector<std::unique_ptr<comm::CommRequest>> requests_;
};

absl::Status CheckRing(const StepContext& sc, const TensorView& q, const TensorView& k,
                       const TensorView& v, const ops::AttentionArgs& args) {
  if (q.rank() != 4 || k.rank() != 4 || q.dim(0) < 2 || q.dim(0) % 2 != 0 || k.dim(0) != q.dim(0) ||
      k.shape != v.shape || k.dim(2) != q.dim(2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring attention: q ", q.DebugString(), ", k ", k.DebugString(), ", v ",
                     v.DebugString(), " must be [2B, NH, c, D] and [2B, G, c, D] (two chunks)"));
  }
  const int64_t B = q.dim(0) / 2, C = sc.cp_size(), T = 2 * C * q.dim(2);
  if (args.dropout.p > 0 && args.dropout.key_inner % (T * T) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring attention: the dropout key mapping's key_inner ", args.dropout.key_inner,
                     " must be 0 or a multiple of the whole sequence's T x T = ", T * T));
  }
  if (args.padding_mask != nullptr && (args.padding_mask->shape != Shape{2 * C * B, q.dim(2)} ||
                                       args.padding_mask->dtype != DType::kI32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring attention: padding mask ", args.padding_mask->DebugString(), " must be i32 [",
        2 * C * B, ", ", q.dim(2), "] (the whole sequence's, chunk-major)"));
  }
  return absl::OkStatus();
}

// Element [b, x] of a contiguous [B, X, ...] as a [1, 1, ...] view.
TensorView Item(const TensorView& t, int64_t b, int64_t x) {
  Shape shape = t.shape;
  const int64_t inner = t.numel() / (shape[0] * shape[1]);
  shape[0] = shape[1] = 1;
  char* base = static_cast<char*>(t.data) + (b * t.dim(1) + x) * inner * DTypeSize(t.dtype);
  return TensorView(base, std::move(shape), t.dtype, t.device);
}

// Where a block's probabilities sit in the whole sequence's [B, NH, T, T] (T = 2 C c): query
// chunk a, key chunk b of chunk length c.
struct BlockPlace {
  int64_t T, c, a, b;
};

// The dropout keys of matrix m (= sample * NH + head, local heads) of block `at`, for a fused call
// on that one [c, c] block: the keys `whole` gives those elements in the whole probabilities
// (whole.key_inner is 0 or a multiple of T^2, CheckRing).
ops::DropoutArgs BlockKeys(const ops::DropoutArgs& whole, int64_t m, const BlockPlace& at) {
  const int64_t matrix = m * at.T * at.T;
  ops::DropoutArgs d = whole;
  d.key_base = whole.key_inner > 0
                   ? whole.key_base + (matrix / whole.key_inner) * whole.key_outer_stride +
                         matrix % whole.key_inner
                   : whole.key_base + matrix;
  d.key_base += at.a * at.c * at.T + at.b * at.c;
  d.key_inner = at.c;
  d.key_outer_stride = at.T;
  return d;
}

// The (sample, head) pairs' arguments of a block with dropout: one fused call each, since the
// rows of a block are not contiguous in the whole probabilities' keys.
template <typename Fn>
absl::Status ForEachHead(const TensorView& q, const TensorView& k, const ops::AttentionArgs& a,
                         const BlockPlace& at, Fn fn) {
  const int64_t B = q.dim(0), NH = q.dim(1), per_group = NH / k.dim(1);
  for (int64_t b = 0; b < B; ++b) {
    TensorView mask;
    ops::AttentionArgs one = a;
    if (a.padding_mask != nullptr) {
      mask = a.padding_mask->Slice(b, b + 1);
      one.padding_mask = &mask;
    }
    for (int64_t h = 0; h < NH; ++h) {
      one.dropout = BlockKeys(a.dropout, b * NH + h, at);
      RETURN_IF_ERROR(fn(b, h, h / per_group, one));
    }
  }
  return absl::OkStatus();
}

// ops::FusedAttention of one block (q [B, NH, c, D], k, v [B, G, c, D]) at `at`.
absl::Status BlockForward(const ExecContext& ec, const TensorView& q, const TensorView& k,
                          const TensorView& v, const ops::AttentionArgs& a, const BlockPlace& at,
                          const TensorView& out, const TensorView& lse) {
  if (a.dropout.p == 0) return ops::FusedAttention(ec, q, k, v, a, out, lse);
  return ForEachHead(q, k, a, at,
                     [&](int64_t b, int64_t h, int64_t g, const ops::AttentionArgs& one) {
                       return ops::FusedAttention(ec, Item(q, b, h), Item(k, b, g), Item(v, b, g),
                                                  one, Item(out, b, h), Item(lse, b, h));
                     });
}

// ops::FusedAttentionBackward of one block at `at`: overwrites dq, dk, dv.
absl::Status BlockBackward(const ExecContext& ec, const TensorView& q, const TensorView& k,
                           const TensorView& v, const TensorView& out, const TensorView& dout,
                           const TensorView& lse, const ops::AttentionArgs& a, const BlockPlace& at,
                           const TensorView& dq, const TensorView& dk, const TensorView& dv) {
  if (a.dropout.p == 0) {
    return ops::FusedAttentionBackward(ec, q, k, v, out, dout, lse, a, dq, dk, dv);
  }
  // A head's key and value gradients into scratch, added into its group's.
  ASSIGN_OR_RETURN(Tensor hk, Alloc(ec, Item(k, 0, 0).shape, k.dtype));
  ASSIGN_OR_RETURN(Tensor hv, Alloc(ec, Item(k, 0, 0).shape, k.dtype));
  RETURN_IF_ERROR(SetZero(ec, dk));
  RETURN_IF_ERROR(SetZero(ec, dv));
  return ForEachHead(
      q, k, a, at, [&](int64_t b, int64_t h, int64_t g, const ops::AttentionArgs& one) {
        RETURN_IF_ERROR(ops::FusedAttentionBackward(
            ec, Item(q, b, h), Item(k, b, g), Item(v, b, g), Item(out, b, h), Item(dout, b, h),
            Item(lse, b, h), one, Item(dq, b, h), hk.view(), hv.view()));
        RETURN_IF_ERROR(ops::Add(ec, Item(dk, b, g), hk.view(), Item(dk, b, g)));
        return ops::Add(ec, Item(dv, b, g), hv.view(), Item(dv, b, g));
      });
}

// Two buffers of k's shape for each ring step's incoming keys and values (none when C = 1).
absl::StatusOr<std::vector<Tensor>> RingBuffers(const StepContext& sc, const TensorView& k) {
  std::vector<Tensor> buffers;
  if (sc.cp_size() == 1) return buffers;
  for (int i = 0; i < 4; ++i) {
    ASSIGN_OR_RETURN(Tensor t, Alloc(*sc.exec, k.shape, k.dtype));
    buffers.push_back(std::move(t));
  }
  return buffers;
}

}  // namespace

absl::Status RingAttentionForward(const StepContext& sc, const TensorView& q, const TensorView& k,
                                  const TensorView& v, const ops::AttentionArgs& args,
                                  const TensorView& out, const TensorView& lse) {
  RETURN_IF_ERROR(CheckRing(sc, q, k, v, args));
  const ExecContext& ec = *sc.exec;
  const int C = sc.cp_size(), r = sc.cp_rank();
  const int64_t B = q.dim(0) / 2, c = q.dim(2), T = 2 * C * c;
  ASSIGN_OR_RETURN(std::vector<Tensor> ring, RingBuffers(sc, k));
  const TensorView q0 = CpHalf(q, 0), lse0 = CpHalf(lse, 0);
  ASSIGN_OR_RETURN(Tensor blk_out, Alloc(ec, q0.shape, q.dtype));
  ASSIGN_OR_RETURN(Tensor blk_lse, Alloc(ec, lse0.shape, DType::kF32));
  bool have[2] = {false, false};
  TensorView cur_k = k, cur_v = v;
  for (int s = 0; s < C; ++s) {
    const int64_t src = (r - s + C) % C;
    RingExchange exchange;
    if (s + 1 < C) {
      RETURN_IF_ERROR(exchange.Start(sc, cur_k, cur_v, ring[2 * (s % 2)].view(),
                                     ring[2 * (s % 2) + 1].view(), kKeyTag, kValueTag));
      if (!sc.cp_overlap) RETURN_IF_ERROR(exchange.Wait());
    }
    for (const Block& blk : StepBlocks(sc, src, args.causal)) {
      TensorView mask;
      const ops::AttentionArgs a = BlockArgs(args, blk, KvChunk(C, src, blk.kh), B, &mask);
      const TensorView qh = CpHalf(q, blk.qh), kh = CpHalf(cur_k, blk.kh);
      const TensorView vh = CpHalf(cur_v, blk.kh);
      const TensorView out_h = CpHalf(out, blk.qh), lse_h = CpHalf(lse, blk.qh);
      const BlockPlace at{T, c, CpChunk(sc, blk.qh), KvChunk(C, src, blk.kh)};
      if (!have[blk.qh]) {  // The first block of these queries writes the output directly.
        RETURN_IF_ERROR(BlockForward(ec, qh, kh, vh, a, at, out_h, lse_h));
        have[blk.qh] = true;
        continue;
      }
      RETURN_IF_ERROR(BlockForward(ec, qh, kh, vh, a, at, blk_out.view(), blk_lse.view()));
      RETURN_IF_ERROR(ops::AttentionMerge(ec, out_h, lse_h, blk_out.view(), blk_lse.view()));
    }
    RETURN_IF_ERROR(exchange.Wait());
    if (s + 1 < C) {
      cur_k = ring[2 * (s % 2)].view();
      cur_v = ring[2 * (s % 2) + 1].view();
    }
  }
  return absl::OkStatus();
}

namespace {

// One ring step of the backward: every block's gradients with the keys and values in hand; dq
// accumulated, the key and value gradients into stage_k, stage_v (zeroed first).
absl::Status BackwardBlocks(const StepContext& sc, int64_t src, const TensorView& q,
                            const TensorView& k, const TensorView& v, const TensorView& out,
                            const TensorView& dout, const TensorView& lse,
                            const ops::AttentionArgs& args, const TensorView& dq,
                            const TensorView& stage_k, const TensorView& stage_v) {
  const ExecContext& ec = *sc.exec;
  const int64_t B = q.dim(0) / 2, C = sc.cp_size(), c = q.dim(2);
  ASSIGN_OR_RETURN(Tensor blk_dq, Alloc(ec, CpHalf(q, 0).shape, q.dtype));
  ASSIGN_OR_RETURN(Tensor blk_dk, Alloc(ec, CpHalf(k, 0).shape, k.dtype));
  ASSIGN_OR_RETURN(Tensor blk_dv, Alloc(ec, CpHalf(k, 0).shape, k.dtype));
  RETURN_IF_ERROR(SetZero(ec, stage_k));
  RETURN_IF_ERROR(SetZero(ec, stage_v));
  for (const Block& blk : StepBlocks(sc, src, args.causal)) {
    TensorView mask;
    const ops::AttentionArgs a = BlockArgs(args, blk, KvChunk(C, src, blk.kh), B, &mask);
    const BlockPlace at{2 * C * c, c, CpChunk(sc, blk.qh), KvChunk(C, src, blk.kh)};
    RETURN_IF_ERROR(BlockBackward(ec, CpHalf(q, blk.qh), CpHalf(k, blk.kh), CpHalf(v, blk.kh),
                                  CpHalf(out, blk.qh), CpHalf(dout, blk.qh), CpHalf(lse, blk.qh), a,
                                  at, blk_dq.view(), blk_dk.view(), blk_dv.view()));
    const TensorView dq_h = CpHalf(dq, blk.qh);
    const TensorView sk = CpHalf(stage_k, blk.kh), sv = CpHalf(stage_v, blk.kh);
    RETURN_IF_ERROR(ops::Add(ec, dq_h, blk_dq.view(), dq_h));
    RETURN_IF_ERROR(ops::Add(ec, sk, blk_dk.view(), sk));
    RETURN_IF_ERROR(ops::Add(ec, sv, blk_dv.view(), sv));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RingAttentionBackward(const StepContext& sc, const TensorView& q, const TensorView& k,
                                   const TensorView& v, const TensorView& out,
                                   const TensorView& dout, const TensorView& lse,
                                   const ops::AttentionArgs& args, const TensorView& dq,
                                   const TensorView& dk, const TensorView& dv) {
  RETURN_IF_ERROR(CheckRing(sc, q, k, v, args));
  const ExecContext& ec = *sc.exec;
  const int C = sc.cp_size(), r = sc.cp_rank();
  ASSIGN_OR_RETURN(std::vector<Tensor> ring, RingBuffers(sc, k));
  // acc: two (dk, dv) pairs that alternate between sending and receiving; stage: this step's part.
  std::vector<Tensor> acc, stage;
  for (int i = 0; i < 4; ++i) {
    ASSIGN_OR_RETURN(Tensor t, Alloc(ec, k.shape, k.dtype));
    acc.push_back(std::move(t));
  }
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(Tensor t, Alloc(ec, k.shape, k.dtype));
    stage.push_back(std::move(t));
  }
  RETURN_IF_ERROR(SetZero(ec, dq));
  RETURN_IF_ERROR(SetZero(ec, acc[0].view()));
  RETURN_IF_ERROR(SetZero(ec, acc[1].view()));
  int cur = 0;  // acc[2 cur], acc[2 cur + 1]: the gradients of the keys and values in hand.
  TensorView cur_k = k, cur_v = v;
  RingExchange grads;  // The previous step's gradients travelling on.
  for (int s = 0; s < C; ++s) {
    const int64_t src = (r - s + C) % C;
    RingExchange exchange;
    if (s + 1 < C) {
      RETURN_IF_ERROR(exchange.Start(sc, cur_k, cur_v, ring[2 * (s % 2)].view(),
                                     ring[2 * (s % 2) + 1].view(), kKeyTag, kValueTag));
      if (!sc.cp_overlap) RETURN_IF_ERROR(exchange.Wait());
    }
    RETURN_IF_ERROR(BackwardBlocks(sc, src, q, cur_k, cur_v, out, dout, lse, args, dq,
                                   stage[0].view(), stage[1].view()));
    RETURN_IF_ERROR(grads.Wait());  // acc[cur] now holds src's gradients from the other ranks.
    const TensorView ak = acc[2 * cur].view(), av = acc[2 * cur + 1].view();
    RETURN_IF_ERROR(ops::Add(ec, ak, stage[0].view(), ak));
    RETURN_IF_ERROR(ops::Add(ec, av, stage[1].view(), av));
    RETURN_IF_ERROR(exchange.Wait());
    if (C > 1) {
      RETURN_IF_ERROR(grads.Start(sc, ak, av, acc[2 * (1 - cur)].view(),
                                  acc[2 * (1 - cur) + 1].view(), kKeyGradTag, kValueGradTag));
      if (!sc.cp_overlap) RETURN_IF_ERROR(grads.Wait());
      cur = 1 - cur;
      cur_k = ring[2 * (s % 2)].view();
      cur_v = ring[2 * (s % 2) + 1].view();
    }
  }
  RETURN_IF_ERROR(grads.Wait());  // After C exchanges this rank's own gradients are home.
  RETURN_IF_ERROR(CopyTensor(ec, acc[2 * cur].view(), dk));
  return CopyTensor(ec, acc[2 * cur + 1].view(), dv);
}

}  // namespace nn
}  // namespace mt
