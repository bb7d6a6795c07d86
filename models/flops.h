// Model FLOPs as Megatron logs them (the paper's formula; no credit for anything but the
// model's own matrix products). For a GPT with dense attention and a 4h GeLU MLP:
//   F = 72 B s L h^2 (1 + s / (12 h) + V / (12 L h)),
// and with full activation recomputation
//   F = 96 B s L h^2 (1 + s / (6 h) + V / (16 L h)),
// B the batch in samples, s the sequence length, L layers, h the hidden size, V the (padded)
// vocabulary. Written per layer as B s L (c_w W + c_a s h) + 6 B s h V, where W is the number of
// weights in a layer's matrix products (12 h^2 for the standard layer: QKV 3h^2, the attention
// output h^2, the MLP 8h^2) and (c_w, c_a) = (6, 6), or (8, 16) with recomputation, so that
// architectures with other layer shapes (a SwiGLU MLP: 3 h f) count the same way.
#ifndef MT_MODELS_FLOPS_H_
#define MT_MODELS_FLOPS_H_

#include <cstdint>

namespace mt {
namespace models {

// The transformer layers' FLOPs (forward + backward, + the recomputed forward) for `batch`
// samples of `seq` tokens, `layer_weights` weights per layer in matrix products.
inline double LayerFlops(int64_t batch, int64_t seq, int64_t layers, int64_t hidden,
                         double layer_weights, bool recompute) {
  const double B = batch, s = seq, L = layers, h = hidden;
  const double cw = recompute ? 8.0 : 6.0, ca = recompute ? 16.0 : 6.0;
  return B * s * L * (cw * layer_weights + ca * s * h);
}

// Weights in one standard layer's matrix products: QKV and output projections, and the two MLP
// matrices of width ffn.
inline double StandardLayerWeights(int64_t hidden, int64_t ffn) {
  const double h = hidden, f = ffn;
  return 4.0 * h * h + 2.0 * h * f;
}

// A decoder LM (GPT): the layers plus the tied output layer's logits at every position.
inline double DecoderFlops(int64_t batch, int64_t seq, int64_t layers, int64_t hidden,
                           int64_t vocab, double layer_weights, bool recompute) {
  return LayerFlops(batch, seq, layers, hidden, layer_weights, recompute) +
         6.0 * batch * seq * static_cast<double>(hidden) * vocab;
}

// GPT with the standard 4h layer: the paper's formula above.
inline double ModelFlopsPerIteration(int64_t batch, int64_t seq, int64_t layers, int64_t hidden,
                                     int64_t vocab, bool recompute) {
  return DecoderFlops(batch, seq, layers, hidden, vocab, StandardLayerWeights(hidden, 4 * hidden),
                      recompute);
}

// BERT pretraining on `batch` samples of `seq` tokens with `masked` scored MLM positions in all:
// the transformer layers as above (bidirectional attention costs what causal attention is
// counted at), plus the heads, which run after the layers and are never recomputed: the MLM
// transform (h x h) and the tied logits (h x V) at the masked positions only, the pooler (h x h)
// and the sentence-order classifier (h x 2) once per sample; 6 FLOPs per weight per row for
// forward + backward.
inline double BertModelFlops(int64_t batch, int64_t seq, int64_t masked, int64_t layers,
                             int64_t hidden, int64_t vocab, double layer_weights, bool recompute) {
  const double B = batch, h = hidden, V = vocab, m = masked;
  return LayerFlops(batch, seq, layers, hidden, layer_weights, recompute) +
         6.0 * m * (h * h + h * V) + 6.0 * B * (h * h + 2.0 * h);
}

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_FLOPS_H_
