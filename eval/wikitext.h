// WikiText-103 perplexity, the data side of Megatron-LM's zero-shot protocol:
//
//   1. T_o = CountOriginalTokens(raw file text), counted before anything else.
//   2. text = DetokenizeWikiText(raw); tokens = GPT-2 BPE of text (T of them).
//   3. windows = SlidingWindows::Create(T, seq_length, stride); for every window w, Fill()
//      gives the model's inputs and next-token targets, and the positions whose NLL counts.
//   4. S = sum of the NLL of the scored targets (every target index 1..T-1 exactly once);
//      WikiTextPerplexity(S, T, T_o) gives loss, ppl and adjusted_ppl (the paper's number).
//
// All functions are pure; SlidingWindows is an immutable value (thread-safe to share).
#ifndef MT_EVAL_WIKITEXT_H_
#define MT_EVAL_WIKITEXT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mt {
namespace eval {

// T_o: the number of pieces of Python's raw.strip().split(" "). Stripping removes Python
// whitespace at both ends (python_text.h); the split is on single ASCII spaces only, so each extra
// space in a run adds an (empty) piece, and newlines and tabs separate nothing. An empty or
// all-whitespace text has one (empty) piece.
int64_t CountOriginalTokens(absl::string_view raw);

// Megatron's WikiText detokeniser, rules applied in this order (every plain replacement replaces
// all non-overlapping occurrences left to right, as Python's str.replace):
//   1. "s '" -> "s'"
//   2. the regex /' [0-9]/ (slashes literal) -> the literal text /'[0-9]/
//   3. " @-@ " -> "-", " @,@ " -> ",", " @.@ " -> "."
//   4. " : " -> ": ", " ; " -> "; ", " . " -> ". ", " ! " -> "! ", " ? " -> "? ", " , " -> ", "
//   5. the regexes \(\s*([^\)]*?)\s*\) -> (\1), then the same for [ ], { }, "...", '...': each
//      opening delimiter with a closing one after it is joined to the first closing one, and the
//      whitespace just inside both ends is removed; matches do not overlap and are found left to
//      right as Python's re.sub finds them. The text between may span lines; \s is Python's
//      whitespace set (python_text.h).
//   6. "= = = =" -> "====", "= = =" -> "===", "= =" -> "=="
//   7. " ° " -> "°"; " \n" -> "\n"; "\n " -> "\n"; " N " -> " 1 "; " 's" -> "'s"
// Text is UTF-8 (the delimiters are ASCII, so multi-byte characters pass through unchanged).
std::string DetokenizeWikiText(absl::string_view text);

// The sliding windows over T tokens with sequence length L and stride o (Megatron's
// overlapping_eval). Window w starts at token s = w * o and covers tokens[s : s + L + 1]: inputs
// are tokens[s .. s+L-1], targets tokens[s+1 .. s+L] (the next token of each input), both padded
// on the right with a pad id where they run past the end.
//
// Scoring: window 0 scores all its real targets (target indices 1 .. min(L, T-1)); every later
// window scores only its last o positions (L-o .. L-1), minus those whose target is padding. So
// window w >= 1 scores target indices L + (w-1)*o + 1 .. min(L + w*o, T-1), and every target index
// 1..T-1 is scored by exactly one window.
//
// Count: num_windows = 1 + ceil(max(0, T-1-L) / o): just enough windows that every target is
// scored, and none that scores nothing. (Megatron computed 1 + ceil(max(0, T-1-o) / o), which for
// o < L adds trailing windows whose scored positions are all padding; they add nothing to S.)
class SlidingWindows {
 public:
  // InvalidArgument unless num_tokens >= 2 (at least one target), seq_length >= 1 and
  // 1 <= stride <= seq_length.
  static absl::StatusOr<SlidingWindows> Create(int64_t num_tokens, int64_t seq_length,
                                               int64_t stride);

  int64_t num_tokens() const { return num_tokens_; }  // T
  int64_t seq_length() const { return seq_length_; }  // L
  int64_t stride() const { return stride_; }          // o
  int64_t num_windows() const { return num_windows_; }
  int64_t num_targets() const { return num_tokens_ - 1; }  // T - 1

  // The index of window w's first input token: w * o.
  int64_t start(int64_t w) const;
  // Window w scores positions [scored_begin(w), scored_end(w)) of its L positions (position j's
  // target is token start(w) + j + 1). Never empty. CHECK-fails unless 0 <= w < num_windows().
  int64_t scored_begin(int64_t w) const;
  int64_t scored_end(int64_t w) const;

  // Writes window w's rows:
  //   inputs[j]  = tokens[start + j]      or pad_id past the end    // [L]
  //   targets[j] = tokens[start + j + 1]  or pad_id past the end    // [L]
  //   scored[j]  = 1 for j in [scored_begin(w), scored_end(w)), else 0   // [L]
  // CHECK-fails (programmer errors) unless tokens.size() == num_tokens(), 0 <= w < num_windows()
  // and every output has seq_length() elements.
  void Fill(absl::Span<const int32_t> tokens, int64_t w, int32_t pad_id, absl::Span<int32_t> inputs,
            absl::Span<int32_t> targets, absl::Span<uint8_t> scored) const;

 private:
  SlidingWindows(int64_t num_tokens, int64_t seq_length, int64_t stride, int64_t num_windows)
      : num_tokens_(num_tokens),
        seq_length_(seq_length),
        stride_(stride),
        num_windows_(num_windows) {}

  int64_t num_tokens_;
  int64_t seq_length_;
  int64_t stride_;
  int64_t num_windows_;
};

// What the WikiText harness reports.
struct WikiTextResult {
  double loss = 0;          // S / (T - 1): mean NLL per BPE target, in nats
  double ppl = 0;           // exp(min(20, loss))
  double adjusted_ppl = 0;  // exp(min(20, loss * (T - 1) / (T_o - 1))) = exp(min(20, S/(T_o-1)))
  double token_ratio = 0;   // (T - 1) / (T_o - 1)
};

// The result from the summed NLL S of the scored targets (in nats), the BPE token count T and
// the original token count T_o. InvalidArgument unless S is finite and >= 0, T >= 2 and T_o >= 2.
absl::StatusOr<WikiTextResult> WikiTextPerplexity(double total_nll, int64_t num_tokens,
                                                  int64_t num_original_tokens);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_WIKITEXT_H_
