#include "models/gpt2/gpt2_reference.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/testing/reference_math.h"
#include "models/testing/reference_transformer.h"

namespace mt {
namespace models {
namespace testing {

double ReferenceGptLoss(const ModelConfig& c, const ParamMap& p, int B, int T,
                        const std::vector<int>& tokens, const std::vector<int>& labels,
                        const ReferenceLayers& layers) {
  const int H = static_cast<int>(c.hidden_size), N = B * T, V = static_cast<int>(c.vocab_size);
  const double eps = c.layernorm_eps;
  Mat x(N * H);
  const Mat& wte = Get(p, "embedding.word.weight");
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      x[n * H + h] = wte[tokens[n] * H + h];
      if (c.position_embeddings)
        x[n * H + h] += Get(p, "embedding.position.weight")[(n % T) * H + h];
    }
  x = layers(c, p, B, T, std::move(x), [](int, int i, int j) { return j <= i; });  // Causal.
  Mat f = LayerNorm(x, N, H, Get(p, "final_layernorm.weight"), Get(p, "final_layernorm.bias"), eps);
  const Mat& out = c.untie_embeddings_and_output_weights ? Get(p, "output_layer.weight") : wte;
  double total = 0;
  int count = 0;
  for (int n = 0; n < N; ++n) {
    if (labels[n] == -100) continue;
    std::vector<double> logits(V);
    double mx = -1e300;
    for (int v = 0; v < V; ++v) {
      double s = 0;
      for (int h = 0; h < H; ++h) s += f[n * H + h] * out[v * H + h];
      logits[v] = s;
      mx = std::max(mx, s);
    }
    double z = 0;
    for (double l : logits) z += std::exp(l - mx);
    total += std::log(z) + mx - logits[labels[n]];
    ++count;
  }
  return total / count;
}

}  // namespace testing
}  // namespace models
}  // namespace mt
