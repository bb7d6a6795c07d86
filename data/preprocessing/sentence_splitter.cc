#include "data/preprocessing/sentence_splitter.h"

#include <cstddef>

#include "absl/strings/match.h"

namespace mt {
namespace data {
namespace {

// Titles, Latin abbreviations, company words and months, which are usually followed by a name or
// a capitalised word rather than a new sentence. "etc" is left out: it ends sentences as often
// as not.
constexpr absl::string_view kAbbreviations[] = {
    "Mr",  "Mrs", "Ms",   "Dr",  "Prof", "Sr",   "Jr",  "St",  "Mt",   "vs",  "e.g", "i.e",
    "cf",  "al",  "Inc",  "Ltd", "Co",   "Corp", "No",  "Vol", "Fig",  "Gen", "Col", "Capt",
    "Lt",  "Sgt", "Rev",  "Gov", "Sen",  "Rep",  "Jan", "Feb", "Mar",  "Apr", "Jun", "Jul",
    "Aug", "Sep", "Sept", "Oct", "Nov",  "Dec",  "U.S", "U.K", "Ph.D",
};

// UTF-8 curly quotes.
constexpr absl::string_view kLeftDouble = "\xE2\x80\x9C";   // “
constexpr absl::string_view kRightDouble = "\xE2\x80\x9D";  // ”
constexpr absl::string_view kLeftSingle = "\xE2\x80\x98";   // ‘
constexpr absl::string_view kRightSingle = "\xE2\x80\x99";  // ’

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool IsTerminator(char c) { return c == '.' || c == '!' || c == '?'; }
bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
bool IsAlpha(char c) { return IsUpper(c) || (c >= 'a' && c <= 'z'); }

// Length of the closing quote or bracket at text[i], or 0.
size_t ClosingAt(absl::string_view text, size_t i) {
  const char c = text[i];
  if (c == '"' || c == '\'' || c == ')' || c == ']') return 1;
  const absl::string_view rest = text.substr(i);
  if (absl::StartsWith(rest, kRightDouble) || absl::StartsWith(rest, kRightSingle)) return 3;
  return 0;
}

// Whether text[i] starts a character that may begin a sentence after a terminator.
bool SentenceStartAt(absl::string_view text, size_t i) {
  const char c = text[i];
  if (IsUpper(c) || c == '"' || c == '\'' || c == '(' || c == '[') return true;
  const absl::string_view rest = text.substr(i);
  return absl::StartsWith(rest, kLeftDouble) || absl::StartsWith(rest, kLeftSingle);
}

// Whether the '.' at text[dot] follows an abbreviation or an initial.
bool AbbreviationBefore(absl::string_view text, size_t dot) {
  size_t begin = dot;
  while (begin > 0 && (IsAlpha(text[begin - 1]) || text[begin - 1] == '.')) --begin;
  while (begin < dot && text[begin] == '.') ++begin;
  const absl::string_view word = text.substr(begin, dot - begin);
  if (word.size() == 1 && IsUpper(word[0])) return true;
  for (absl::string_view a : kAbbreviations) {
    if (word == a) return true;
  }
  return false;
}

void Emit(absl::string_view text, size_t begin, size_t end, std::vector<absl::string_view>* out) {
  while (begin < end && IsSpace(text[begin])) ++begin;
  while (end > begin && IsSpace(text[end - 1])) --end;
  if (end > begin) out->push_back(text.substr(begin, end - begin));
}

}  // namespace

absl::Span<const absl::string_view> SentenceAbbreviations() { return kAbbreviations; }

std::vector<absl::string_view> SplitSentences(absl::string_view text) {
  std::vector<absl::string_view> out;
  const size_t n = text.size();
  size_t start = 0;  // Start of the current sentence.
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (IsTerminator(c)) {
      const size_t run_begin = i;
      while (i < n && IsTerminator(text[i])) ++i;
      const bool single_dot = i - run_begin == 1 && c == '.';
      size_t end = i;  // Sentence end: after the terminators and any closing marks.
      for (size_t len; end < n && (len = ClosingAt(text, end)) > 0;) end += len;
      size_t next = end;
      int newlines = 0;
      while (next < n && IsSpace(text[next])) newlines += text[next++] == '\n';
      if (next == end) {  // No whitespace after: "3.14", "e.g.,", "?!x".
        i = end;
        continue;
      }
      const bool paragraph = newlines >= 2;
      const bool starts = next < n && SentenceStartAt(text, next);
      if (paragraph || (starts && !(single_dot && AbbreviationBefore(text, run_begin)))) {
        Emit(text, start, end, &out);
        start = next;
      }
      i = next;
      continue;
    }
    if (IsSpace(c)) {
      const size_t space_begin = i;
      int newlines = 0;
      while (i < n && IsSpace(text[i])) newlines += text[i++] == '\n';
      if (newlines >= 2) {
        Emit(text, start, space_begin, &out);
        start = i;
      }
      continue;
    }
    ++i;
  }
  Emit(text, start, n, &out);
  return out;
}

}  // namespace data
}  // namespace mt
