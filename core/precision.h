// The compute dtype as every binary spells it, Megatron's way: --fp16, --bf16 or --fp32, at most
// one; none of them: f32 on the CPU, bf16 on CUDA. Master weights are f32 whatever it is. Every
// binary registers the three flags from PrecisionFlags' fields (core/fields.h), in its config or
// as a ConfigFlags<PrecisionFlags> of their own, and turns them into the DType the code uses,
// once, at start-up.
#ifndef MT_CORE_PRECISION_H_
#define MT_CORE_PRECISION_H_

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/dtype.h"

namespace mt {

struct PrecisionFlags {
  bool fp16 = false, bf16 = false, fp32 = false;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("fp16", &self.fp16, "f16 compute (f32 master weights) with dynamic loss scaling.");
    v("bf16", &self.bf16, "bf16 compute (f32 master weights; the default on CUDA).");
    v("fp32", &self.fp32, "f32 compute (the default on the CPU).");
  }

  // The compute dtype on `device`. InvalidArgument when more than one flag is set.
  absl::StatusOr<DType> Resolve(DeviceType device) const;
};

}  // namespace mt

#endif  // MT_CORE_PRECISION_H_
