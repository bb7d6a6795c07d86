#include "models/bert/bert_reference.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/testing/reference_math.h"
#include "models/testing/reference_transformer.h"

namespace mt {
namespace models {
namespace testing {

namespace {
// -log softmax(logits)[target].
double CrossEntropy(const std::vector<double>& logits, int target) {
  double mx = -1e300;
  for (double l : logits) mx = std::max(mx, l);
  double z = 0;
  for (double l : logits) z += std::exp(l - mx);
  return std::log(z) + mx - logits[target];
}

// The encoder output [rows * T, H]: embeddings, layers (bidirectional, padded keys masked) and,
// for pre-norm, the final LayerNorm.
Mat Encoder(const ModelConfig& c, const ParamMap& p, const BertInputs& in) {
  const int H = static_cast<int>(c.hidden_size), B = in.rows, T = in.T, N = B * T;
  const double eps = c.layernorm_eps;
  const bool prenorm = c.norm == nn::NormPosition::kPreNorm;
  Mat x(N * H);
  const Mat& wte = Get(p, "embedding.word.weight");
  const Mat& tte = Get(p, "embedding.token_type.weight");
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      double v = wte[in.tokens[n] * H + h] + tte[in.token_types[n] * H + h];
      if (c.position_embeddings) v += Get(p, "embedding.position.weight")[(n % T) * H + h];
      x[n * H + h] = v;
    }
  if (!prenorm) {
    x = LayerNorm(x, N, H, Get(p, "embedding.layernorm.weight"), Get(p, "embedding.layernorm.bias"),
                  eps);
  }
  x = ReferenceTransformerLayers(c, p, B, T, std::move(x), [&](int b, int, int j) {
    return in.padding_mask[b * T + j] != 0;
  });  // Padded keys hidden.
  if (prenorm) {
    x = LayerNorm(x, N, H, Get(p, "final_layernorm.weight"), Get(p, "final_layernorm.bias"), eps);
  }
  return x;
}

// tanh(dense(seq[position 0])) for every row: [rows, H].
Mat Pooled(const ModelConfig& c, const ParamMap& p, const BertInputs& in, const Mat& seq) {
  const int H = static_cast<int>(c.hidden_size);
  Mat cls(in.rows * H);
  for (int b = 0; b < in.rows; ++b)
    for (int h = 0; h < H; ++h) cls[b * H + h] = seq[(b * in.T) * H + h];
  Mat pooled =
      Linear(cls, in.rows, H, Get(p, "pooler.dense.weight"), Get(p, "pooler.dense.bias"), H);
  for (double& v : pooled) v = std::tanh(v);
  return pooled;
}

// The mean over the questions of the cross-entropy of their scores (s: [questions * choices]).
double ChoiceLoss(const std::vector<double>& s, const std::vector<int>& right) {
  const size_t Q = right.size(), C = s.size() / Q;
  double loss = 0;
  for (size_t q = 0; q < Q; ++q) {
    loss += CrossEntropy(std::vector<double>(s.begin() + q * C, s.begin() + (q + 1) * C), right[q]);
  }
  return loss / static_cast<double>(Q);
}

// The MLM head's cross-entropy at each position with a label (mlm_labels != -100), in order.
std::vector<double> MlmLosses(const ModelConfig& c, const ParamMap& p, const BertInputs& in,
                              const Mat& seq, const std::vector<int>& mlm_labels) {
  const int H = static_cast<int>(c.hidden_size), V = static_cast<int>(c.vocab_size);
  const int N = in.rows * in.T;
  // The head applied to every position (only the scored ones are kept).
  Mat d = Linear(seq, N, H, Get(p, "lm_head.dense.weight"), Get(p, "lm_head.dense.bias"), H);
  for (double& v : d) v = Gelu(v);
  const Mat t = LayerNorm(d, N, H, Get(p, "lm_head.layernorm.weight"),
                          Get(p, "lm_head.layernorm.bias"), c.layernorm_eps);
  const Mat& wte = Get(p, "embedding.word.weight");
  const Mat& bias = Get(p, "lm_head.bias");
  std::vector<double> out;
  for (int n = 0; n < N; ++n) {
    if (mlm_labels[n] == -100) continue;
    std::vector<double> logits(V);
    for (int v = 0; v < V; ++v) {
      double s = bias[v];
      for (int h = 0; h < H; ++h) s += t[n * H + h] * wte[v * H + h];
      logits[v] = s;
    }
    out.push_back(CrossEntropy(logits, mlm_labels[n]));
  }
  return out;
}
}  // namespace

ReferenceBertLosses ReferenceBertPretrainingLoss(const ModelConfig& c, const ParamMap& p,
                                                 const BertInputs& in,
                                                 const std::vector<int>& mlm_labels,
                                                 const std::vector<int>& sop_labels) {
  const int H = static_cast<int>(c.hidden_size);
  const Mat seq = Encoder(c, p, in);
  ReferenceBertLosses out;
  const std::vector<double> mlm = MlmLosses(c, p, in, seq, mlm_labels);
  for (double l : mlm) out.mlm += l;
  out.mlm /= static_cast<double>(mlm.size());
  const Mat pooled = Pooled(c, p, in, seq);
  const Mat sop = Linear(pooled, in.rows, H, Get(p, "sop_head.weight"), Get(p, "sop_head.bias"), 2);
  for (int b = 0; b < in.rows; ++b) {
    out.sop += CrossEntropy({sop[2 * b], sop[2 * b + 1]}, sop_labels[b]);
  }
  out.sop /= in.rows;
  out.total = out.mlm + out.sop;
  return out;
}

double ReferenceBertMultipleChoiceLoss(const ModelConfig& c, const ParamMap& p,
                                       const BertInputs& in, const std::vector<int>& labels,
                                       std::vector<double>* scores) {
  const int H = static_cast<int>(c.hidden_size);
  const Mat pooled = Pooled(c, p, in, Encoder(c, p, in));
  const Mat s = Linear(pooled, in.rows, H, Get(p, "multiple_choice_head.weight"),
                       Get(p, "multiple_choice_head.bias"), 1);
  if (scores != nullptr) *scores = s;
  return ChoiceLoss(s, labels);
}

double ReferenceBertMaskedChoiceLoss(const ModelConfig& c, const ParamMap& p, const BertInputs& in,
                                     const std::vector<int>& mlm_labels,
                                     const std::vector<int>& choices, std::vector<double>* scores) {
  const std::vector<double> losses = MlmLosses(c, p, in, Encoder(c, p, in), mlm_labels);
  std::vector<double> s(in.rows, 0.0);
  std::vector<int> count(in.rows, 0);
  for (int n = 0, m = 0; n < in.rows * in.T; ++n) {
    if (mlm_labels[n] == -100) continue;
    s[n / in.T] -= losses[m++];
    ++count[n / in.T];
  }
  for (int r = 0; r < in.rows; ++r) s[r] /= count[r];
  if (scores != nullptr) *scores = s;
  return ChoiceLoss(s, choices);
}

}  // namespace testing
}  // namespace models
}  // namespace mt
