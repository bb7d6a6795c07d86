// Hugging Face's GPT2LMHeadModel and BertForPreTraining forward passes (eval mode) in float64,
// written from their published definitions over the Hugging Face tensors: Conv1D weights
// [in, out], torch Linear weights [out, in], the fused c_attn split (q|k|v) in that order, GPT-2's
// gelu_new, BERT's erf GeLU ("gelu") and post-norm layers; and LlamaForCausalLM /
// MistralForCausalLM (RMSNorm, rotate_half rotary embeddings, repeat_kv, SwiGLU, lm_head).
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf_testutil.h"
#include "models/testing/reference_math.h"

namespace mt {
namespace checkpoint {
namespace testing {
namespace {

using models::testing::Gelu;
using models::testing::LayerNorm;
using models::testing::Linear;
using models::testing::Mat;

const Mat& Get(const HfTestModel& m, const std::string& name) { return m.tensors.at(name).values; }

// y = x W^T + b for a torch Linear W [O, I].
Mat TorchLinear(const Mat& x, int N, int I, const Mat& w, const Mat& b, int O) {
  Mat y(static_cast<size_t>(N) * O);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < O; ++o) {
      double s = b[o];
      for (int i = 0; i < I; ++i) s += x[n * I + i] * w[o * I + i];
      y[n * O + o] = s;
    }
  }
  return y;
}

double GeluErf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

double Act(const std::string& name, double x) { return name == "gelu" ? GeluErf(x) : Gelu(x); }

// Multi-head attention of one batch of B sequences: q, k, v [B * T, H] (head h at columns
// [h D, (h + 1) D)); key j of sequence b is visible to query i iff (!causal || j <= i) and
// mask[b T + j] != 0. Returns the merged heads [B * T, H].
Mat Attention(const Mat& q, const Mat& k, const Mat& v, int B, int T, int H, int heads, bool causal,
              const std::vector<int>& mask) {
  const int D = H / heads;
  Mat out(static_cast<size_t>(B) * T * H, 0.0);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < T; ++i) {
        std::vector<double> p(T, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < T; ++j) {
          if ((causal && j > i) || (!mask.empty() && mask[b * T + j] == 0)) continue;
          double s = 0;
          for (int d = 0; d < D; ++d)
            s += q[(b * T + i) * H + h * D + d] * k[(b * T + j) * H + h * D + d];
          p[j] = s / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, p[j]);
        }
        double z = 0;
        for (int j = 0; j < T; ++j) z += p[j] = std::exp(p[j] - mx);
        for (int j = 0; j < T; ++j) {
          for (int d = 0; d < D; ++d) {
            out[(b * T + i) * H + h * D + d] += p[j] / z * v[(b * T + j) * H + h * D + d];
          }
        }
      }
    }
  }
  return out;
}

void AddInto(Mat& x, const Mat& y) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

// Columns [c0, c0 + n) of x [N, C].
Mat Columns(const Mat& x, int N, int C, int c0, int n) {
  Mat y(static_cast<size_t>(N) * n);
  for (int r = 0; r < N; ++r) {
    for (int c = 0; c < n; ++c) y[r * n + c] = x[r * C + c0 + c];
  }
  return y;
}

// x [N, H] times the embedding [V, H] transposed: [N, V].
Mat TiedLogits(const Mat& x, int N, int H, const Mat& emb, int V) {
  return TorchLinear(x, N, H, emb, Mat(V, 0.0), V);
}

// LlamaRMSNorm: w * x / sqrt(mean(x^2) + eps), row by row of x [N, H].
Mat RmsNorm(const Mat& x, int N, int H, const Mat& w, double eps) {
  Mat y(x.size());
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int h = 0; h < H; ++h) ss += x[n * H + h] * x[n * H + h];
    const double r = 1 / std::sqrt(ss / H + eps);
    for (int h = 0; h < H; ++h) y[n * H + h] = w[h] * (x[n * H + h] * r);
  }
  return y;
}

// apply_rotary_pos_emb on x [B * T, heads * D] in place, as LlamaRotaryEmbedding builds it:
// inv_freq[i] = 1 / theta^(2i / D), emb = cat(freqs, freqs), x * cos(emb) +
// rotate_half(x) * sin(emb) with rotate_half(x) = cat(-x[D/2:], x[:D/2]); position of row n:
// n % T.
void ApplyRotary(Mat& x, int N, int T, int heads, int D, double theta) {
  std::vector<double> emb(D), rotated(D);
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < D / 2; ++i) {
      const double inv_freq = 1.0 / std::pow(theta, (2.0 * i) / D);
      emb[i] = emb[i + D / 2] = (n % T) * inv_freq;
    }
    for (int h = 0; h < heads; ++h) {
      double* v = &x[(static_cast<size_t>(n) * heads + h) * D];
      for (int i = 0; i < D; ++i) rotated[i] = i < D / 2 ? -v[i + D / 2] : v[i - D / 2];
      for (int i = 0; i < D; ++i) v[i] = v[i] * std::cos(emb[i]) + rotated[i] * std::sin(emb[i]);
    }
  }
}

// repeat_kv: x [N, G * D] -> [N, G * rep * D], head j of the result being head j / rep of x.
Mat RepeatKv(const Mat& x, int N, int G, int D, int rep) {
  Mat y(static_cast<size_t>(N) * G * rep * D);
  for (int n = 0; n < N; ++n) {
    for (int j = 0; j < G * rep; ++j) {
      for (int d = 0; d < D; ++d) y[(n * G * rep + j) * D + d] = x[(n * G + j / rep) * D + d];
    }
  }
  return y;
}

// LlamaMLP: down(silu(gate(x)) * up(x)), the three torch Linear weights given.
Mat SwiGlu(const Mat& x, int N, int H, int F, const Mat& gate, const Mat& up, const Mat& down) {
  Mat f = TorchLinear(x, N, H, gate, Mat(F, 0.0), F);
  const Mat u = TorchLinear(x, N, H, up, Mat(F, 0.0), F);
  for (size_t i = 0; i < f.size(); ++i) f[i] = f[i] / (1 + std::exp(-f[i])) * u[i];
  return TorchLinear(f, N, F, down, Mat(H, 0.0), H);
}

// MixtralSparseMoeBlock of layer prefix p: routing_weights = softmax(gate(x)), the top k of them
// (torch.topk), divided by their sum; y = sum over the chosen of weight * expert_e(x).
Mat MixtralMoe(const HfTestModel& m, const std::string& p, const Mat& x, int N, int H, int F) {
  const int E = m.config["num_local_experts"], k = m.config["num_experts_per_tok"];
  const Mat logits =
      TorchLinear(x, N, H, Get(m, p + "block_sparse_moe.gate.weight"), Mat(E, 0.0), E);
  std::vector<Mat> out(E);
  for (int e = 0; e < E; ++e) {
    const std::string w = absl::StrCat(p, "block_sparse_moe.experts.", e, ".");
    out[e] = SwiGlu(x, N, H, F, Get(m, w + "w1.weight"), Get(m, w + "w3.weight"),
                    Get(m, w + "w2.weight"));
  }
  Mat y(static_cast<size_t>(N) * H, 0.0);
  for (int n = 0; n < N; ++n) {
    std::vector<double> prob(E);
    double mx = -std::numeric_limits<double>::infinity(), z = 0;
    for (int e = 0; e < E; ++e) mx = std::max(mx, logits[n * E + e]);
    for (int e = 0; e < E; ++e) z += prob[e] = std::exp(logits[n * E + e] - mx);
    for (double& q : prob) q /= z;
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += prob[order[j]];
    for (int j = 0; j < k; ++j) {
      const int e = order[j];
      for (int h = 0; h < H; ++h) y[n * H + h] += prob[e] / sum * out[e][n * H + h];
    }
  }
  return y;
}

}  // namespace

std::vector<double> LlamaLogits(const HfTestModel& m, const std::vector<int>& ids, int B, int T) {
  const int H = m.config["hidden_size"], heads = m.config["num_attention_heads"];
  const int G = m.config["num_key_value_heads"], V = m.config["vocab_size"];
  const int L = m.config["num_hidden_layers"], F = m.config["intermediate_size"], N = B * T;
  const int D = H / heads;
  const double eps = m.config["rms_norm_eps"], theta = m.config["rope_theta"];
  Mat x(static_cast<size_t>(N) * H);
  for (int n = 0; n < N; ++n) {
    for (int h = 0; h < H; ++h) x[n * H + h] = Get(m, "embed_tokens.weight")[ids[n] * H + h];
  }
  for (int l = 0; l < L; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    const auto Proj = [&](const Mat& in, int I, const std::string& s, int O) {
      return TorchLinear(in, N, I, Get(m, p + s + ".weight"), Mat(O, 0.0), O);
    };
    const Mat a = RmsNorm(x, N, H, Get(m, p + "input_layernorm.weight"), eps);
    Mat q = Proj(a, H, "self_attn.q_proj", heads * D), k = Proj(a, H, "self_attn.k_proj", G * D);
    const Mat v = Proj(a, H, "self_attn.v_proj", G * D);
    ApplyRotary(q, N, T, heads, D, theta);
    ApplyRotary(k, N, T, G, D, theta);
    const Mat ctx = Attention(q, RepeatKv(k, N, G, D, heads / G), RepeatKv(v, N, G, D, heads / G),
                              B, T, H, heads, /*causal=*/true, {});
    AddInto(x, Proj(ctx, H, "self_attn.o_proj", H));
    const Mat b = RmsNorm(x, N, H, Get(m, p + "post_attention_layernorm.weight"), eps);
    AddInto(x, m.config.contains("num_local_experts")
                   ? MixtralMoe(m, p, b, N, H, F)
                   : SwiGlu(b, N, H, F, Get(m, p + "mlp.gate_proj.weight"),
                            Get(m, p + "mlp.up_proj.weight"), Get(m, p + "mlp.down_proj.weight")));
  }
  x = RmsNorm(x, N, H, Get(m, "norm.weight"), eps);
  const bool tied = m.tensors.count("lm_head.weight") == 0;
  return TiedLogits(x, N, H, Get(m, tied ? "embed_tokens.weight" : "lm_head.weight"), V);
}

std::vector<double> Gpt2Logits(const HfTestModel& m, const std::vector<int>& ids, int B, int T) {
  const int H = m.config["n_embd"], heads = m.config["n_head"], V = m.config["vocab_size"];
  const int L = m.config["n_layer"], N = B * T, F = 4 * H;
  const double eps = m.config["layer_norm_epsilon"];
  const std::string act = m.config["activation_function"];
  Mat x(static_cast<size_t>(N) * H);
  for (int n = 0; n < N; ++n) {
    for (int h = 0; h < H; ++h) {
      x[n * H + h] = Get(m, "wte.weight")[ids[n] * H + h] + Get(m, "wpe.weight")[(n % T) * H + h];
    }
  }
  for (int l = 0; l < L; ++l) {
    const std::string p = absl::StrCat("h.", l, ".");
    const auto W = [&](const std::string& s) -> const Mat& { return Get(m, p + s); };
    const Mat a = LayerNorm(x, N, H, W("ln_1.weight"), W("ln_1.bias"), eps);
    const Mat qkv = Linear(a, N, H, W("attn.c_attn.weight"), W("attn.c_attn.bias"), 3 * H);
    const Mat ctx = Attention(Columns(qkv, N, 3 * H, 0, H), Columns(qkv, N, 3 * H, H, H),
                              Columns(qkv, N, 3 * H, 2 * H, H), B, T, H, heads,
                              /*causal=*/true, {});
    AddInto(x, Linear(ctx, N, H, W("attn.c_proj.weight"), W("attn.c_proj.bias"), H));
    const Mat b = LayerNorm(x, N, H, W("ln_2.weight"), W("ln_2.bias"), eps);
    Mat f = Linear(b, N, H, W("mlp.c_fc.weight"), W("mlp.c_fc.bias"), F);
    for (double& v : f) v = Act(act, v);
    AddInto(x, Linear(f, N, F, W("mlp.c_proj.weight"), W("mlp.c_proj.bias"), H));
  }
  x = LayerNorm(x, N, H, Get(m, "ln_f.weight"), Get(m, "ln_f.bias"), eps);
  return TiedLogits(x, N, H, Get(m, "wte.weight"), V);
}

BertOutputs BertForward(const HfTestModel& m, const std::vector<int>& ids,
                        const std::vector<int>& token_types, const std::vector<int>& mask, int B,
                        int T) {
  const int H = m.config["hidden_size"], heads = m.config["num_attention_heads"];
  const int V = m.config["vocab_size"], L = m.config["num_hidden_layers"];
  const int F = m.config["intermediate_size"], N = B * T;
  const double eps = m.config["layer_norm_eps"];
  const std::string act = m.config["hidden_act"];
  Mat x(static_cast<size_t>(N) * H);
  for (int n = 0; n < N; ++n) {
    for (int h = 0; h < H; ++h) {
      x[n * H + h] = Get(m, "embeddings.word_embeddings.weight")[ids[n] * H + h] +
                     Get(m, "embeddings.position_embeddings.weight")[(n % T) * H + h] +
                     Get(m, "embeddings.token_type_embeddings.weight")[token_types[n] * H + h];
    }
  }
  x = LayerNorm(x, N, H, Get(m, "embeddings.LayerNorm.weight"), Get(m, "embeddings.LayerNorm.bias"),
                eps);
  for (int l = 0; l < L; ++l) {
    const std::string p = absl::StrCat("encoder.layer.", l, ".");
    const auto W = [&](const std::string& s) -> const Mat& { return Get(m, p + s); };
    const auto Proj = [&](const Mat& in, int I, const std::string& s, int O) {
      return TorchLinear(in, N, I, W(s + ".weight"), W(s + ".bias"), O);
    };
    const Mat ctx =
        Attention(Proj(x, H, "attention.self.query", H), Proj(x, H, "attention.self.key", H),
                  Proj(x, H, "attention.self.value", H), B, T, H, heads,
                  /*causal=*/false, mask);
    AddInto(x, Proj(ctx, H, "attention.output.dense", H));
    x = LayerNorm(x, N, H, W("attention.output.LayerNorm.weight"),
                  W("attention.output.LayerNorm.bias"), eps);
    Mat f = Proj(x, H, "intermediate.dense", F);
    for (double& v : f) v = Act(act, v);
    AddInto(x, Proj(f, F, "output.dense", H));
    x = LayerNorm(x, N, H, W("output.LayerNorm.weight"), W("output.LayerNorm.bias"), eps);
  }
  BertOutputs out;
  Mat t = TorchLinear(x, N, H, Get(m, "cls.predictions.transform.dense.weight"),
                      Get(m, "cls.predictions.transform.dense.bias"), H);
  for (double& v : t) v = Act(act, v);
  t = LayerNorm(t, N, H, Get(m, "cls.predictions.transform.LayerNorm.weight"),
                Get(m, "cls.predictions.transform.LayerNorm.bias"), eps);
  out.mlm_logits = TiedLogits(t, N, H, Get(m, "embeddings.word_embeddings.weight"), V);
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < V; ++v) out.mlm_logits[n * V + v] += Get(m, "cls.predictions.bias")[v];
  }
  Mat first(static_cast<size_t>(B) * H);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) first[b * H + h] = x[(b * T) * H + h];
  }
  Mat pooled =
      TorchLinear(first, B, H, Get(m, "pooler.dense.weight"), Get(m, "pooler.dense.bias"), H);
  for (double& v : pooled) v = std::tanh(v);
  out.nsp_logits = TorchLinear(pooled, B, H, Get(m, "cls.seq_relationship.weight"),
                               Get(m, "cls.seq_relationship.bias"), 2);
  return out;
}

}  // namespace testing
}  // namespace checkpoint
}  // namespace mt
