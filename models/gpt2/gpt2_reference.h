// A float64 GPT-2 forward written independently of nn/ and core/ops (plain loops), used by the
// tests as the reference for losses and, through finite differences, for gradients. Parameters are
// looked up by the names GptModel declares, in their GLOBAL (serial) layout. No dropout.
#ifndef MT_MODELS_GPT2_GPT2_REFERENCE_H_
#define MT_MODELS_GPT2_GPT2_REFERENCE_H_

#include <map>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/testing/reference_math.h"
#include "models/testing/reference_transformer.h"

namespace mt {
namespace models {
namespace testing {

// Mean cross-entropy over labels != -100; tokens/labels are [B, T] row-major. The logits come
// from "output_layer.weight" with c.untie_embeddings_and_output_weights, else the word embedding.
// `layers` computes the transformer stack (GPT-2's by default; a variant's reference passes its
// own).
double ReferenceGptLoss(const ModelConfig& c, const ParamMap& p, int B, int T,
                        const std::vector<int>& tokens, const std::vector<int>& labels,
                        const ReferenceLayers& layers = ReferenceTransformerLayers);

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_GPT2_GPT2_REFERENCE_H_
