// LAMBADA, the data side of Megatron-LM's zero-shot protocol: read the texts, split each into a
// context and the target to predict, and lay the pair out as one next-token sequence.
//
//   ASSIGN_OR_RETURN(std::vector<LambadaExample> examples,
//                    LoadLambada("lambada_test.jsonl", *gpt2, LambadaMode::kStrict));
//   for (const LambadaExample& e : examples) {
//     ASSIGN_OR_RETURN(LambadaSequence seq, LayoutLambada(e, seq_length, gpt2->eod_id()));
//     // correct iff the model's argmax equals seq.targets[j] at every j with seq.scored[j] == 1
//   }
//   accuracy = correct / examples.size()
//
// No shared state: every function is thread-safe (so are the tokenizer's const methods).
#ifndef MT_EVAL_LAMBADA_H_
#define MT_EVAL_LAMBADA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/tokenizers/tokenizer.h"

namespace mt {
namespace eval {

// How the target is chosen.
enum class LambadaMode {
  // The paper's whole-word protocol: w = the last whitespace-separated word of the text (Python's
  // text.split()[-1]); context = tokenize(text[:text.rfind(w)].strip()); target =
  // tokenize(" " + w), all of its BPE tokens.
  kStrict,
  // Megatron's non-strict variant: ids = tokenize(text); context = all ids but the last; target =
  // the last id alone.
  kLastToken,
};

// The texts of a LAMBADA jsonl file: one JSON object {"text": "..."} per line (other keys are
// ignored), in file order. The file may end with or without a newline; a "\r" before a newline is
// JSON whitespace. Errors:
//   NotFound (or another errno-derived code) naming the file if it cannot be read;
//   InvalidArgument "FILE:LINE: ..." for a line that is empty or not valid JSON, is not a JSON
//   object, has no "text" key, whose "text" is not a string, or whose text has no words (empty or
//   all whitespace); InvalidArgument naming the file if it holds no lines at all.
absl::StatusOr<std::vector<std::string>> ReadLambadaTexts(const std::string& path);

// One example as token ids.
struct LambadaExample {
  std::vector<int32_t> context;  // [C], C >= 1
  std::vector<int32_t> target;   // [K], K >= 1 (K == 1 for kLastToken)
};

// Splits `text` as `mode` says, tokenizing with `tokenizer` (GPT-2 BPE for the paper's numbers).
// InvalidArgument if the text has no words, or if the context would be empty (kStrict: the text is
// a single word; kLastToken: it tokenizes to fewer than 2 ids).
absl::StatusOr<LambadaExample> MakeLambadaExample(const data::Tokenizer& tokenizer,
                                                  absl::string_view text, LambadaMode mode);

// ReadLambadaTexts then MakeLambadaExample for every line; a MakeLambadaExample error is reported
// as "FILE:LINE: ...".
absl::StatusOr<std::vector<LambadaExample>> LoadLambada(const std::string& path,
                                                        const data::Tokenizer& tokenizer,
                                                        LambadaMode mode);

// One example as a model input row of L positions (Megatron's layout): the sequence
// ids = context + target, padded on the right with pad_id to L + 1 ids; inputs = ids[0 .. L-1],
// targets = ids[1 .. L]; scored[j] = 1 exactly at the K positions whose target is a target token,
// j = C-1 .. C+K-2.
struct LambadaSequence {
  std::vector<int32_t> inputs;   // [L]
  std::vector<int32_t> targets;  // [L]
  std::vector<uint8_t> scored;   // [L]
};

// InvalidArgument if C + K > L + 1 (the example does not fit; the message gives both lengths) or
// seq_length < 1.
absl::StatusOr<LambadaSequence> LayoutLambada(const LambadaExample& example, int64_t seq_length,
                                              int32_t pad_id);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_LAMBADA_H_
