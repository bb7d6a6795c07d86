// The float64 transformer stack shared by the GPT-2 and BERT references (tests only): the layers
// "layers.<l>.*" as the models declare them, pre- or post-norm, with attention restricted by a
// visibility predicate (causal for GPT-2, padding for BERT). No dropout; no final LayerNorm.
#ifndef MT_MODELS_TESTING_REFERENCE_TRANSFORMER_H_
#define MT_MODELS_TESTING_REFERENCE_TRANSFORMER_H_

#include <functional>
#include <string>

#include "models/config.h"
#include "models/testing/reference_math.h"

namespace mt {
namespace models {
namespace testing {

// visible(b, i, j): may query position i of sample b attend to key position j?
using Visibility = std::function<bool(int b, int i, int j)>;

// The attention of the layer whose parameters are "<pre>attention.*" (pre = "layers.<l>."), on
// in [B * T, hidden]: QKV projection (columns ordered (head, q|k|v, d)), softmax over the visible
// keys, output projection.
Mat ReferenceAttention(const ModelConfig& c, const ParamMap& p, const std::string& pre, int B,
                       int T, const Mat& in, const Visibility& visible);
// The GeLU MLP "<pre>mlp.{fc1,fc2}.*" on in [N, hidden].
Mat ReferenceMlp(const ModelConfig& c, const ParamMap& p, const std::string& pre, int N,
                 const Mat& in);

// x: [B * T, hidden] embeddings; returns the output of the c.num_layers layers.
Mat ReferenceTransformerLayers(const ModelConfig& c, const ParamMap& p, int B, int T, Mat x,
                               const Visibility& visible);
// The signature of ReferenceTransformerLayers, for a model's reference that takes another layer
// structure (a model variant's).
using ReferenceLayers = std::function<Mat(const ModelConfig& c, const ParamMap& p, int B, int T,
                                          Mat x, const Visibility& visible)>;

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_TESTING_REFERENCE_TRANSFORMER_H_
