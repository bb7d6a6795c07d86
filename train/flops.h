// Model FLOPs per iteration as Megatron logs them (REFERENCE.md section 1): for a GPT with dense
// attention and a 4h FFN, F = 72 B s L h^2 (1 + s / (12 h) + V / (12 L h)); with full activation
// recomputation F = 96 B s L h^2 (1 + s / (6 h) + V / (16 L h)). B is the global batch in samples,
// s the sequence length, L layers, h hidden size, V the (padded) vocabulary.
#ifndef MT_TRAIN_FLOPS_H_
#define MT_TRAIN_FLOPS_H_

#include <cstdint>

namespace mt {
namespace train {

inline double ModelFlopsPerIteration(int64_t batch, int64_t seq, int64_t layers, int64_t hidden,
                                     int64_t vocab, bool recompute) {
  const double B = batch, s = seq, L = layers, h = hidden, V = vocab;
  if (recompute) return 96.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * L * h));
  return 72.0 * B * s * L * h * h * (1.0 + s / (12.0 * h) + V / (12.0 * L * h));
}

// Model FLOPs of BERT pretraining on `batch` samples of `seq` tokens with `masked` scored MLM
// positions in all: the transformer layers as in ModelFlopsPerIteration (bidirectional attention
// costs what causal attention is counted at), plus the heads, which run after the layers and are
// never recomputed: the MLM transform (h x h) and the tied logits (h x V) at the masked positions
// only, the pooler (h x h) and the sentence-order classifier (h x 2) once per sample; 6 FLOPs per
// weight per row for forward + backward.
inline double BertModelFlops(int64_t batch, int64_t seq, int64_t masked, int64_t layers,
                             int64_t hidden, int64_t vocab, bool recompute) {
  const double B = batch, s = seq, L = layers, h = hidden, V = vocab, m = masked;
  const double stack = recompute ? 96.0 * B * s * L * h * h * (1.0 + s / (6.0 * h))
                                 : 72.0 * B * s * L * h * h * (1.0 + s / (12.0 * h));
  return stack + 6.0 * m * (h * h + h * V) + 6.0 * B * (h * h + 2.0 * h);
}

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_FLOPS_H_
