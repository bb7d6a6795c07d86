#include "core/ops/heads.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/status.h"

namespace mt {
namespace ops {

namespace {

absl::Status CheckView(absl::string_view op, absl::string_view name, const TensorView& t,
                       int64_t numel, const TensorView& first) {
  RETURN_IF_ERROR(CheckContiguous(op, name, t));
  if (t.numel() != numel) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " (", t.DebugString(), ") must hold ", numel, " elements"));
  }
  RETURN_IF_ERROR(CheckSameDevice(op, {&first, &t}));
  RETURN_IF_ERROR(CheckSameDType(op, {&first, &t}));
  MT_ROUTE_DEVICE(op, t, absl::OkStatus());
  return absl::OkStatus();
}

absl::Status CheckShapeArgs(absl::string_view op, const HeadsShape& s) {
  if (s.batch < 0 || s.seq < 0 || s.heads < 0 || s.head_dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": negative dimension in B=", s.batch, " T=",
                                                   s.seq, " NH=", s.heads, " D=", s.head_dim));
  }
  return absl::OkStatus();
}

// Copies D-element rows between the token-major index (b, t, h, slot) of a tensor with `slots`
// rows per head and the head-major index (b, h, t) of `num_outputs` tensors. `to_heads` selects
// the direction. Parallel over (b, t).
void Permute(const ExecContext& ctx, const HeadsShape& s, int slots, char* token_major,
             char* const* head_major, bool to_heads, size_t elem) {
  const int64_t B = s.batch, T = s.seq, NH = s.heads, D = s.head_dim;
  const size_t row = static_cast<size_t>(D) * elem;
  ParallelFor(ctx.pool, B * T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      for (int64_t h = 0; h < NH; ++h) {
        for (int slot = 0; slot < slots; ++slot) {
          char* tok = token_major + (((bt * NH + h) * slots + slot) * row);
          char* hm = head_major[slot] + (((b * NH + h) * T + t) * row);
          if (to_heads) {
            std::memcpy(hm, tok, row);
          } else {
            std::memcpy(tok, hm, row);
          }
        }
      }
    }
  });
}

absl::Status QkvCommon(absl::string_view op, const HeadsShape& s, const TensorView& qkv,
                       const TensorView& q, const TensorView& k, const TensorView& v) {
  RETURN_IF_ERROR(CheckShapeArgs(op, s));
  const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
  RETURN_IF_ERROR(CheckView(op, "qkv", qkv, 3 * n, qkv));
  RETURN_IF_ERROR(CheckView(op, "q", q, n, qkv));
  RETURN_IF_ERROR(CheckView(op, "k", k, n, qkv));
  RETURN_IF_ERROR(CheckView(op, "v", v, n, qkv));
  return absl::OkStatus();
}

absl::Status HeadsCommon(absl::string_view op, const HeadsShape& s, const TensorView& x,
                         const TensorView& y) {
  RETURN_IF_ERROR(CheckShapeArgs(op, s));
  const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
  RETURN_IF_ERROR(CheckView(op, "head-major tensor", x, n, x));
  RETURN_IF_ERROR(CheckView(op, "token-major tensor", y, n, x));
  return absl::OkStatus();
}

}  // namespace

absl::Status SplitQkv(const ExecContext& ctx, const HeadsShape& s, const TensorView& qkv,
                      const TensorView& q, const TensorView& k, const TensorView& v) {
  RETURN_IF_ERROR(QkvCommon("SplitQkv", s, qkv, q, k, v));
  const TensorView* hm[3] = {&q, &k, &v};
  MT_ROUTE_DEVICE("SplitQkv", qkv,
                  cuda::HeadsPermute("SplitQkv", ctx, s.batch, s.seq, s.heads, s.head_dim, qkv, hm,
                                     3, /*to_heads=*/true));
  char* outs[3] = {static_cast<char*>(q.data), static_cast<char*>(k.data),
                   static_cast<char*>(v.data)};
  Permute(ctx, s, 3, static_cast<char*>(qkv.data), outs, /*to_heads=*/true, DTypeSize(qkv.dtype));
  return absl::OkStatus();
}

absl::Status MergeQkv(const ExecContext& ctx, const HeadsShape& s, const TensorView& q,
                      const TensorView& k, const TensorView& v, const TensorView& qkv) {
  RETURN_IF_ERROR(QkvCommon("MergeQkv", s, qkv, q, k, v));
  const TensorView* hm[3] = {&q, &k, &v};
  MT_ROUTE_DEVICE("MergeQkv", qkv,
                  cuda::HeadsPermute("MergeQkv", ctx, s.batch, s.seq, s.heads, s.head_dim, qkv, hm,
                                     3, /*to_heads=*/false));
  char* ins[3] = {static_cast<char*>(q.data), static_cast<char*>(k.data),
                  static_cast<char*>(v.data)};
  Permute(ctx, s, 3, static_cast<char*>(qkv.data), ins, /*to_heads=*/false, DTypeSize(qkv.dtype));
  return absl::OkStatus();
}

absl::Status MergeHeads(const ExecContext& ctx, const HeadsShape& s, const TensorView& x,
                        const TensorView& y) {
  RETURN_IF_ERROR(HeadsCommon("MergeHeads", s, x, y));
  const TensorView* hm[1] = {&x};
  MT_ROUTE_DEVICE("MergeHeads", x,
                  cuda::HeadsPermute("MergeHeads", ctx, s.batch, s.seq, s.heads, s.head_dim, y, hm,
                                     1, /*to_heads=*/false));
  char* head_major[1] = {static_cast<char*>(x.data)};
  Permute(ctx, s, 1, static_cast<char*>(y.data), head_major, /*to_heads=*/false,
          DTypeSize(x.dtype));
  return absl::OkStatus();
}

absl::Status SplitHeads(const ExecContext& ctx, const HeadsShape& s, const TensorView& y,
                        const TensorView& x) {
  RETURN_IF_ERROR(HeadsCommon("SplitHeads", s, x, y));
  const TensorView* hm[1] = {&x};
  MT_ROUTE_DEVICE("SplitHeads", x,
                  cuda::HeadsPermute("SplitHeads", ctx, s.batch, s.seq, s.heads, s.head_dim, y, hm,
                                     1, /*to_heads=*/true));
  char* head_major[1] = {static_cast<char*>(x.data)};
  Permute(ctx, s, 1, static_cast<char*>(y.data), head_major, /*to_heads=*/true, DTypeSize(x.dtype));
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
