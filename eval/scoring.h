// Scoring language-model logits on the host: the negative log-likelihood of a target token and
// the predicted (argmax) token, over the REAL vocabulary only. The models' logits carry padding
// columns (the vocabulary padded for tensor parallelism, models::Model::padded_vocab()); these are
// not tokens, so they are excluded from both the softmax and the argmax.
//
// Precision: each row's log-sum-exp is computed in float64 from the f32 logits (max-shifted, so
// no overflow; every exponential within 1e-15 relative), so a score adds no rounding of its own
// beyond float64's; sums of scores should be accumulated in double too. Cost: one pass for the
// maximum and one of exponentials over the real vocabulary per row, in SIMD vectors (about
// 0.1-0.2 ms per row of 50257 on one core of a 2.8 GHz Xeon).
#ifndef MT_EVAL_SCORING_H_
#define MT_EVAL_SCORING_H_

#include <cstdint>

#include "core/thread_pool.h"

namespace mt {
namespace eval {

struct TokenScore {
  double nll = 0;      // -log softmax(logits[:real_vocab])[target], in nats.
  int32_t argmax = 0;  // argmax over logits[:real_vocab], the lowest index among equal maxima
                       // (0 when a logit is NaN).
};

// Scores `rows` rows of `logits` (f32, row i at logits + i * stride, stride >= real_vocab;
// columns at or past real_vocab are ignored) against targets[i], writing out[i]. Rows are split
// over `pool` (null: the calling thread). A NaN logit makes its row's nll NaN. CHECK-fails
// (a programmer error) unless real_vocab >= 1, stride >= real_vocab and every target is in
// [0, real_vocab).
void ScoreRows(const float* logits, int64_t rows, int64_t stride, int64_t real_vocab,
               const int32_t* targets, ThreadPool* pool, TokenScore* out);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_SCORING_H_
