// The LAMBADA-format baseline a language model must beat: a word bigram model of the training
// text, which predicts a passage's last word from the word before it alone.
//
//   BigramBaseline b = BigramBaseline::Build(training_texts);
//   int64_t correct = b.CountCorrect(lambada_lines);  // of lambada_lines.size()
#ifndef MT_EXPERIMENTS_GPT2_ZEROSHOT_BIGRAM_H_
#define MT_EXPERIMENTS_GPT2_ZEROSHOT_BIGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace experiments {

// Words are split at whitespace. The context is the previous word as written (case and
// punctuation kept); the prediction is the most frequent following word with its trailing
// non-alphanumeric characters removed (the form of a LAMBADA target, heldout.h's ToLambadaText),
// ties to the bytewise smallest; a context never seen predicts the most frequent such word.
class BigramBaseline {
 public:
  static BigramBaseline Build(const std::vector<std::string>& texts);

  std::string Predict(absl::string_view previous_word) const;

  // The lines (LAMBADA texts: the last word is the target) whose last word Predict(the word
  // before it) gives exactly; lines of fewer than 2 words count as wrong.
  int64_t CountCorrect(const std::vector<std::string>& lines) const;
  // The same per line, in order: whether Predict gives that line's last word.
  std::vector<bool> CorrectPerLine(const std::vector<std::string>& lines) const;

 private:
  absl::flat_hash_map<std::string, std::string> best_;  // Context -> prediction.
  std::string fallback_;
};

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_GPT2_ZEROSHOT_BIGRAM_H_
