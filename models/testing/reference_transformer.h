// The float64 transformer stack shared by the GPT-2 and BERT references (tests only): the layers
// "layers.<l>.*" as the models declare them, pre- or post-norm, with attention restricted by a
// visibility predicate (causal for GPT-2, padding for BERT). No dropout; no final LayerNorm.
#ifndef MT_MODELS_TESTING_REFERENCE_TRANSFORMER_H_
#define MT_MODELS_TESTING_REFERENCE_TRANSFORMER_H_

#include <functional>

#include "models/config.h"
#include "models/testing/reference_math.h"

namespace mt {
namespace models {
namespace testing {

// visible(b, i, j): may query position i of sample b attend to key position j?
using Visibility = std::function<bool(int b, int i, int j)>;

// x: [B * T, hidden] embeddings; returns the output of the c.num_layers layers.
Mat ReferenceTransformerLayers(const ModelConfig& c, const ParamMap& p, int B, int T, Mat x,
                               const Visibility& visible);

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_TESTING_REFERENCE_TRANSFORMER_H_
