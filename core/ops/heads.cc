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
  if (s.batch < 0 || s.seq < 0 || s.heads < 0 || s.head_dim < 0 || s.groups < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": negative dimension in B=", s.batch,
                                                   " T=", s.seq, " NH=", s.heads, " D=", s.head_dim,
                                                   " G=", s.groups));
  }
  if (s.groups > 0 && s.heads % s.groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", s.groups, " key/value groups do not divide ", s.heads, " heads"));
  }
  return absl::OkStatus();
}

// Copies D-element rows between the token-major index (b, t, g, slot) of a tensor with G groups
// of `slots` rows and the head-major index (b, h, t) of up to three tensors: slot r < per_group
// is row (b, g per_group + r, t) of head_major[0] (G per_group heads), slot per_group row
// (b, g, t) of head_major[1] and slot per_group + 1 of head_major[2] (G heads). slots = 1,
// per_group = 1 is the plain permutation [B, T, G, D] <-> [B, G, T, D]. `to_heads` selects the
// direction. Parallel over (b, t).
void Permute(const ExecContext& ctx, const HeadsShape& s, int64_t G, int64_t per_group, int slots,
             char* token_major, char* const* head_major, bool to_heads, size_t elem) {
  const int64_t B = s.batch, T = s.seq, D = s.head_dim;
  const size_t row = static_cast<size_t>(D) * elem;
  ParallelFor(ctx.pool, B * T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      for (int64_t g = 0; g < G; ++g) {
        for (int slot = 0; slot < slots; ++slot) {
          const bool query = slot < per_group;
          const int64_t heads = query ? G * per_group : G;
          const int64_t h = query ? g * per_group + slot : g;
          char* tok = token_major + (((bt * G + g) * slots + slot) * row);
          char* hm =
              head_major[query ? 0 : slot - per_group + 1] + (((b * heads + h) * T + t) * row);
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

// Query heads per key/value group (validated shapes).
int64_t PerGroup(const HeadsShape& s) { return s.kv_heads() == 0 ? 1 : s.heads / s.kv_heads(); }

absl::Status QkvCommon(absl::string_view op, const HeadsShape& s, const TensorView& qkv,
                       const TensorView& q, const TensorView& k, const TensorView& v) {
  RETURN_IF_ERROR(CheckShapeArgs(op, s));
  const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
  const int64_t n_kv = s.batch * s.seq * s.kv_heads() * s.head_dim;
  RETURN_IF_ERROR(CheckView(op, "qkv", qkv, n + 2 * n_kv, qkv));
  RETURN_IF_ERROR(CheckView(op, "q", q, n, qkv));
  RETURN_IF_ERROR(CheckView(op, "k", k, n_kv, qkv));
  RETURN_IF_ERROR(CheckView(op, "v", v, n_kv, qkv));
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
                  cuda::HeadsPermute("SplitQkv", ctx, s.batch, s.seq, s.kv_heads(), PerGroup(s),
                                     s.head_dim, qkv, hm, PerGroup(s) + 2, /*to_heads=*/true));
  char* outs[3] = {static_cast<char*>(q.data), static_cast<char*>(k.data),
                   static_cast<char*>(v.data)};
  Permute(ctx, s, s.kv_heads(), PerGroup(s), PerGroup(s) + 2, static_cast<char*>(qkv.data), outs,
          /*to_heads=*/true, DTypeSize(qkv.dtype));
  return absl::OkStatus();
}

absl::Status MergeQkv(const ExecContext& ctx, const HeadsShape& s, const TensorView& q,
                      const TensorView& k, const TensorView& v, const TensorView& qkv) {
  RETURN_IF_ERROR(QkvCommon("MergeQkv", s, qkv, q, k, v));
  const TensorView* hm[3] = {&q, &k, &v};
  MT_ROUTE_DEVICE("MergeQkv", qkv,
                  cuda::HeadsPermute("MergeQkv", ctx, s.batch, s.seq, s.kv_heads(), PerGroup(s),
                                     s.head_dim, qkv, hm, PerGroup(s) + 2, /*to_heads=*/false));
  char* ins[3] = {static_cast<char*>(q.data), static_cast<char*>(k.data),
                  static_cast<char*>(v.data)};
  Permute(ctx, s, s.kv_heads(), PerGroup(s), PerGroup(s) + 2, static_cast<char*>(qkv.data), ins,
          /*to_heads=*/false, DTypeSize(qkv.dtype));
  return absl::OkStatus();
}

absl::Status MergeHeads(const ExecContext& ctx, const HeadsShape& s, const TensorView& x,
                        const TensorView& y) {
  RETURN_IF_ERROR(HeadsCommon("MergeHeads", s, x, y));
  const TensorView* hm[1] = {&x};
  MT_ROUTE_DEVICE("MergeHeads", x,
                  cuda::HeadsPermute("MergeHeads", ctx, s.batch, s.seq, s.heads, /*per_group=*/1,
                                     s.head_dim, y, hm, 1, /*to_heads=*/false));
  char* head_major[1] = {static_cast<char*>(x.data)};
  Permute(ctx, s, s.heads, /*per_group=*/1, 1, static_cast<char*>(y.data), head_major,
          /*to_heads=*/false, DTypeSize(x.dtype));
  return absl::OkStatus();
}

absl::Status SplitHeads(const ExecContext& ctx, const HeadsShape& s, const TensorView& y,
                        const TensorView& x) {
  RETURN_IF_ERROR(HeadsCommon("SplitHeads", s, x, y));
  const TensorView* hm[1] = {&x};
  MT_ROUTE_DEVICE("SplitHeads", x,
                  cuda::HeadsPermute("SplitHeads", ctx, s.batch, s.seq, s.heads, /*per_group=*/1,
                                     s.head_dim, y, hm, 1, /*to_heads=*/true));
  char* head_major[1] = {static_cast<char*>(x.data)};
  Permute(ctx, s, s.heads, /*per_group=*/1, 1, static_cast<char*>(y.data), head_major,
          /*to_heads=*/true, DTypeSize(x.dtype));
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
