#include "models/gpt2/gpt2_reference.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/testing/reference_math.h"

namespace mt {
namespace models {
namespace testing {

double ReferenceGptLoss(const ModelConfig& c, const ParamMap& p, int B, int T,
                        const std::vector<int>& tokens, const std::vector<int>& labels) {
  const int H = static_cast<int>(c.hidden_size), NH = c.num_attention_heads, D = H / NH;
  const int F = static_cast<int>(c.ffn()), N = B * T, V = static_cast<int>(c.vocab_size);
  const double eps = c.layernorm_eps;
  Mat x(N * H);
  const Mat& wte = Get(p, "embedding.word.weight");
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      x[n * H + h] = wte[tokens[n] * H + h];
      if (c.position_embeddings) x[n * H + h] += Get(p, "embedding.position.weight")[(n % T) * H + h];
    }
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string pre = absl::StrCat("layers.", l, ".");
    const bool prenorm = c.norm == nn::NormPosition::kPreNorm;
    auto attention = [&](const Mat& in) {
      Mat qkv = Linear(in, N, H, Get(p, pre + "attention.qkv.weight"),
                       Get(p, pre + "attention.qkv.bias"), 3 * H);
      Mat ctx(N * H);
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
          for (int i = 0; i < T; ++i) {
            // Columns ordered (head, q|k|v, d).
            auto at = [&](int t, int slot, int d) {
              return qkv[(b * T + t) * 3 * H + (h * 3 + slot) * D + d];
            };
            std::vector<double> s(i + 1);
            double mx = -1e300;
            for (int j = 0; j <= i; ++j) {
              double dot = 0;
              for (int d = 0; d < D; ++d) dot += at(i, 0, d) * at(j, 1, d);
              s[j] = dot / std::sqrt(static_cast<double>(D));
              mx = std::max(mx, s[j]);
            }
            double z = 0;
            for (double& v : s) z += (v = std::exp(v - mx));
            for (int d = 0; d < D; ++d) {
              double acc = 0;
              for (int j = 0; j <= i; ++j) acc += s[j] / z * at(j, 2, d);
              ctx[(b * T + i) * H + h * D + d] = acc;
            }
          }
      return Linear(ctx, N, H, Get(p, pre + "attention.proj.weight"),
                    Get(p, pre + "attention.proj.bias"), H);
    };
    auto mlp = [&](const Mat& in) {
      Mat a = Linear(in, N, H, Get(p, pre + "mlp.fc1.weight"), Get(p, pre + "mlp.fc1.bias"), F);
      for (double& v : a) v = Gelu(v);
      return Linear(a, N, F, Get(p, pre + "mlp.fc2.weight"), Get(p, pre + "mlp.fc2.bias"), H);
    };
    const Mat& g1 = Get(p, pre + "ln1.weight");
    const Mat& b1 = Get(p, pre + "ln1.bias");
    const Mat& g2 = Get(p, pre + "ln2.weight");
    const Mat& b2 = Get(p, pre + "ln2.bias");
    if (prenorm) {
      Mat a = attention(LayerNorm(x, N, H, g1, b1, eps));
      for (int i = 0; i < N * H; ++i) x[i] += a[i];
      Mat m = mlp(LayerNorm(x, N, H, g2, b2, eps));
      for (int i = 0; i < N * H; ++i) x[i] += m[i];
    } else {
      Mat a = attention(x);
      for (int i = 0; i < N * H; ++i) a[i] += x[i];
      x = LayerNorm(a, N, H, g1, b1, eps);
      Mat m = mlp(x);
      for (int i = 0; i < N * H; ++i) m[i] += x[i];
      x = LayerNorm(m, N, H, g2, b2, eps);
    }
  }
  Mat f = LayerNorm(x, N, H, Get(p, "final_layernorm.weight"), Get(p, "final_layernorm.bias"), eps);
  double total = 0;
  int count = 0;
  for (int n = 0; n < N; ++n) {
    if (labels[n] == -100) continue;
    std::vector<double> logits(V);
    double mx = -1e300;
    for (int v = 0; v < V; ++v) {
      double s = 0;
      for (int h = 0; h < H; ++h) s += f[n * H + h] * wte[v * H + h];
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
