#include "models/testing/reference_transformer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mt {
namespace models {
namespace testing {

Mat ReferenceAttention(const ModelConfig& c, const ParamMap& p, const std::string& pre, int B,
                       int T, const Mat& in, const Visibility& visible) {
  const int H = static_cast<int>(c.hidden_size), NH = c.num_attention_heads, D = H / NH;
  const int G = c.query_groups(), per_group = NH / G, W = (NH + 2 * G) * D;
  const int N = B * T;
  Mat qkv =
      Linear(in, N, H, Get(p, pre + "attention.qkv.weight"), Get(p, pre + "attention.qkv.bias"), W);
  Mat ctx(N * H);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < T; ++i) {
        // Columns ordered (group, {its per_group queries, key, value}, d): slot 0 is head h's
        // query, slots 1 and 2 its group's key and value.
        const int g = h / per_group;
        auto at = [&](int t, int slot, int d) {
          const int col = slot == 0 ? h % per_group : per_group + slot - 1;
          return qkv[(b * T + t) * W + (g * (per_group + 2) + col) * D + d];
        };
        std::vector<double> w(T, 0.0);
        double mx = -1e300;
        for (int j = 0; j < T; ++j) {
          if (!visible(b, i, j)) continue;
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += at(i, 0, d) * at(j, 1, d);
          w[j] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, w[j]);
        }
        double z = 0;
        for (int j = 0; j < T; ++j) {
          w[j] = visible(b, i, j) ? std::exp(w[j] - mx) : 0.0;
          z += w[j];
        }
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < T; ++j) acc += w[j] / z * at(j, 2, d);
          ctx[(b * T + i) * H + h * D + d] = acc;
        }
      }
    }
  }
  return Linear(ctx, N, H, Get(p, pre + "attention.proj.weight"),
                Get(p, pre + "attention.proj.bias"), H);
}

Mat ReferenceMlp(const ModelConfig& c, const ParamMap& p, const std::string& pre, int N,
                 const Mat& in) {
  const int H = static_cast<int>(c.hidden_size), F = static_cast<int>(c.ffn());
  Mat u = Linear(in, N, H, Get(p, pre + "mlp.fc1.weight"), Get(p, pre + "mlp.fc1.bias"), F);
  for (double& v : u) v = Gelu(v);
  return Linear(u, N, F, Get(p, pre + "mlp.fc2.weight"), Get(p, pre + "mlp.fc2.bias"), H);
}

Mat ReferenceTransformerLayers(const ModelConfig& c, const ParamMap& p, int B, int T, Mat x,
                               const Visibility& visible) {
  const int H = static_cast<int>(c.hidden_size), N = B * T;
  const double eps = c.layernorm_eps;
  const bool prenorm = c.norm == nn::NormPosition::kPreNorm;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string pre = absl::StrCat("layers.", l, ".");
    const Mat& g1 = Get(p, pre + "ln1.weight");
    const Mat& b1 = Get(p, pre + "ln1.bias");
    const Mat& g2 = Get(p, pre + "ln2.weight");
    const Mat& b2 = Get(p, pre + "ln2.bias");
    if (prenorm) {
      Mat a = ReferenceAttention(c, p, pre, B, T, LayerNorm(x, N, H, g1, b1, eps), visible);
      for (int i = 0; i < N * H; ++i) x[i] += a[i];
      Mat m = ReferenceMlp(c, p, pre, N, LayerNorm(x, N, H, g2, b2, eps));
      for (int i = 0; i < N * H; ++i) x[i] += m[i];
    } else {
      Mat a = ReferenceAttention(c, p, pre, B, T, x, visible);
      for (int i = 0; i < N * H; ++i) a[i] += x[i];
      x = LayerNorm(a, N, H, g1, b1, eps);
      Mat m = ReferenceMlp(c, p, pre, N, x);
      for (int i = 0; i < N * H; ++i) m[i] += x[i];
      x = LayerNorm(m, N, H, g2, b2, eps);
    }
  }
  return x;
}

}  // namespace testing
}  // namespace models
}  // namespace mt
