#include "eval/wikitext.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "eval/python_text.h"
#include "glog/logging.h"

namespace mt {
namespace eval {
namespace {

// Megatron caps the exponent so that a diverged model reports exp(20) instead of infinity.
constexpr double kMaxExponent = 20.0;

// re.sub(r"/' [0-9]/", r"/'[0-9]/", text): the slashes are literal, so this replaces the
// five characters  / ' space digit /  with the eight characters  / ' [ 0 - 9 ] /.
std::string ReplaceSlashQuoteDigit(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text.size() - i >= 5 && text.compare(i, 3, "/' ") == 0 && text[i + 3] >= '0' &&
        text[i + 3] <= '9' && text[i + 4] == '/') {
      out += "/'[0-9]/";
      i += 5;
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

// re.sub(r"O\s*([^C]*?)\s*C", r"O\1C", text) for the delimiters O = open, C = close. A match starts
// at an `open` that has a `close` somewhere after it and ends at the first such `close` (the class
// [^C] cannot cross it); the greedy leading \s* and the lazy group leave the group equal to the
// text between with whitespace stripped at both ends. Scanning resumes after the match. An `open`
// without a `close` after it cannot start a match, and neither can any later character, so the
// rest is copied.
std::string JoinDelimited(absl::string_view text, char open, char close) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != open) {
      out.push_back(text[i++]);
      continue;
    }
    const size_t end = text.find(close, i + 1);
    if (end == absl::string_view::npos) break;
    out.push_back(open);
    const absl::string_view inside = PyStrip(text.substr(i + 1, end - i - 1));
    out.append(inside.data(), inside.size());
    out.push_back(close);
    i = end + 1;
  }
  out.append(text.data() + i, text.size() - i);
  return out;
}

struct Replacement {
  const char* from;
  const char* to;
};

// Plain replacements, applied in order between the regex rules.
constexpr Replacement kNumbersAndPunctuation[] = {
    {" @-@ ", "-"}, {" @,@ ", ","}, {" @.@ ", "."}, {" : ", ": "}, {" ; ", "; "},
    {" . ", ". "},  {" ! ", "! "},  {" ? ", "? "},  {" , ", ", "},
};
constexpr Replacement kHeadingsAndSpacing[] = {
    {"= = = =", "===="}, {"= = =", "==="}, {"= =", "=="},  {" \u00b0 ", "\u00b0"},
    {" \n", "\n"},       {"\n ", "\n"},    {" N ", " 1 "}, {" 's", "'s"},
};

// Each in turn as Python's str.replace(from, to): all non-overlapping occurrences, left to right.
template <size_t N>
void ReplaceEach(const Replacement (&replacements)[N], std::string* text) {
  for (const Replacement& r : replacements) absl::StrReplaceAll({{r.from, r.to}}, text);
}

}  // namespace

int64_t CountOriginalTokens(absl::string_view raw) {
  const absl::string_view stripped = PyStrip(raw);
  return 1 + static_cast<int64_t>(std::count(stripped.begin(), stripped.end(), ' '));
}

std::string DetokenizeWikiText(absl::string_view text) {
  std::string s = absl::StrReplaceAll(text, {{"s '", "s'"}});
  s = ReplaceSlashQuoteDigit(s);
  ReplaceEach(kNumbersAndPunctuation, &s);
  s = JoinDelimited(s, '(', ')');
  s = JoinDelimited(s, '[', ']');
  s = JoinDelimited(s, '{', '}');
  s = JoinDelimited(s, '"', '"');
  s = JoinDelimited(s, '\'', '\'');
  ReplaceEach(kHeadingsAndSpacing, &s);
  return s;
}

absl::StatusOr<SlidingWindows> SlidingWindows::Create(int64_t num_tokens, int64_t seq_length,
                                                      int64_t stride) {
  if (num_tokens < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding windows: need at least 2 tokens (one target), got ", num_tokens));
  }
  if (seq_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding windows: seq_length must be >= 1, got ", seq_length));
  }
  if (stride < 1 || stride > seq_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding windows: stride (overlapping_eval) ", stride,
                     " must be in [1, seq_length = ", seq_length, "]"));
  }
  // Window 0 scores targets 1..L; each later one the next o.
  const int64_t after_first = std::max<int64_t>(0, num_tokens - 1 - seq_length);
  const int64_t num_windows = 1 + (after_first + stride - 1) / stride;
  return SlidingWindows(num_tokens, seq_length, stride, num_windows);
}

int64_t SlidingWindows::start(int64_t w) const {
  CHECK(w >= 0 && w < num_windows_) << "window " << w << " of " << num_windows_;
  return w * stride_;
}

int64_t SlidingWindows::scored_begin(int64_t w) const {
  CHECK(w >= 0 && w < num_windows_) << "window " << w << " of " << num_windows_;
  return w == 0 ? 0 : seq_length_ - stride_;
}

int64_t SlidingWindows::scored_end(int64_t w) const {
  // Position j's target is token start + j + 1, which must be <= T - 1.
  return std::min(seq_length_, num_tokens_ - 1 - start(w));
}

void SlidingWindows::Fill(absl::Span<const int32_t> tokens, int64_t w, int32_t pad_id,
                          absl::Span<int32_t> inputs, absl::Span<int32_t> targets,
                          absl::Span<uint8_t> scored) const {
  CHECK_EQ(static_cast<int64_t>(tokens.size()), num_tokens_);
  CHECK_EQ(static_cast<int64_t>(inputs.size()), seq_length_);
  CHECK_EQ(static_cast<int64_t>(targets.size()), seq_length_);
  CHECK_EQ(static_cast<int64_t>(scored.size()), seq_length_);
  const int64_t s = start(w);
  const int64_t begin = scored_begin(w);
  const int64_t end = scored_end(w);
  for (int64_t j = 0; j < seq_length_; ++j) {
    inputs[j] = s + j < num_tokens_ ? tokens[s + j] : pad_id;
    targets[j] = s + j + 1 < num_tokens_ ? tokens[s + j + 1] : pad_id;
    scored[j] = j >= begin && j < end ? 1 : 0;
  }
}

absl::StatusOr<WikiTextResult> WikiTextPerplexity(double total_nll, int64_t num_tokens,
                                                  int64_t num_original_tokens) {
  if (!std::isfinite(total_nll) || total_nll < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WikiText perplexity: the summed NLL must be finite and >= 0, got ", total_nll));
  }
  if (num_tokens < 2 || num_original_tokens < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WikiText perplexity: need at least 2 BPE tokens and 2 original tokens, got T = ",
        num_tokens, ", T_o = ", num_original_tokens));
  }
  WikiTextResult r;
  const double targets = static_cast<double>(num_tokens - 1);
  r.loss = total_nll / targets;
  r.token_ratio = targets / static_cast<double>(num_original_tokens - 1);
  r.ppl = std::exp(std::min(kMaxExponent, r.loss));
  r.adjusted_ppl = std::exp(std::min(kMaxExponent, r.loss * r.token_ratio));
  return r;
}

}  // namespace eval
}  // namespace mt
