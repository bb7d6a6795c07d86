// Data movement between the token-major layout of linear layers and the head-major layout of
// attention. Pure permutations: results are exact in every dtype.
//
//   SplitQkv:  qkv [B, T, G, NH / G + 2, D]  ->  q [B, NH, T, D], k, v [B, G, T, D]
//              (the fused QKV projection's columns are ordered (group, {its NH / G query heads,
//               its key, its value}, d), so that a contiguous tensor-parallel split of the
//               columns gives each rank whole groups; G key/value heads, G = NH without grouped-
//               query attention: then the order is (head, {q,k,v}, d), qkv [B, T, NH, 3, D])
//   MergeQkv:  the inverse (the backward of SplitQkv): dq, dk, dv -> dqkv
//   MergeHeads: x [B, NH, T, D] -> y [B, T, NH, D]   (attention output back to tokens)
//   SplitHeads: the inverse (the backward of MergeHeads)
//
// Views are contiguous; any dtype; shapes as above (qkv may be given as [B, T, (NH + 2 G) * D] and
// y as [B, T, NH * D]: only the element count and the explicit dims B, T, NH, G, D matter).
// InvalidArgument for negative dims, a G that does not divide NH, or views of another size,
// dtype or device.
#ifndef MT_CORE_OPS_HEADS_H_
#define MT_CORE_OPS_HEADS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

struct HeadsShape {
  int64_t batch = 0;     // B
  int64_t seq = 0;       // T
  int64_t heads = 0;     // NH (this rank's heads)
  int64_t head_dim = 0;  // D
  // G: key/value heads of SplitQkv / MergeQkv (this rank's groups, dividing NH); 0: NH.
  int64_t groups = 0;
  int64_t kv_heads() const { return groups > 0 ? groups : heads; }
};

absl::Status SplitQkv(const ExecContext& ctx, const HeadsShape& s, const TensorView& qkv,
                      const TensorView& q, const TensorView& k, const TensorView& v);
absl::Status MergeQkv(const ExecContext& ctx, const HeadsShape& s, const TensorView& q,
                      const TensorView& k, const TensorView& v, const TensorView& qkv);
absl::Status MergeHeads(const ExecContext& ctx, const HeadsShape& s, const TensorView& x,
                        const TensorView& y);
absl::Status SplitHeads(const ExecContext& ctx, const HeadsShape& s, const TensorView& y,
                        const TensorView& x);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_HEADS_H_
