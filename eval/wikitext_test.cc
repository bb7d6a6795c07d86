#include "eval/wikitext.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/status_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace eval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---- T_o -------------------------------------------------------------------------------------

TEST(CountOriginalTokensTest, CountsPiecesOfSplitOnSingleSpaces) {
  EXPECT_EQ(CountOriginalTokens("a b c"), 3);
  // Each extra space of a run is one more (empty) piece: "a", "", "b" and "a", "", "", "b".
  EXPECT_EQ(CountOriginalTokens("a  b"), 3);
  EXPECT_EQ(CountOriginalTokens("a   b"), 4);
}

TEST(CountOriginalTokensTest, StripsWhitespaceAtBothEndsOnly) {
  EXPECT_EQ(CountOriginalTokens(" a  b \n"), 3);
  EXPECT_EQ(CountOriginalTokens("\t\n a b\n\n"), 2);
  // Python's strip() also removes U+3000 and U+00A0.
  EXPECT_EQ(CountOriginalTokens("\u3000a b\u00a0"), 2);
}

TEST(CountOriginalTokensTest, NewlinesAreNotSeparators) {
  EXPECT_EQ(CountOriginalTokens("a\nb c"), 2);
  EXPECT_EQ(CountOriginalTokens("a\tb"), 1);
  // A WikiText-like file: the inner " \n \n " gives the pieces "\n" and "\n".
  // Pieces: "=", "Title", "=", "\n", "\n", "First", "line", ".".
  EXPECT_EQ(CountOriginalTokens(" = Title = \n \n First line . \n"), 8);
}

TEST(CountOriginalTokensTest, EmptyTextIsOnePiece) {
  EXPECT_EQ(CountOriginalTokens(""), 1);
  EXPECT_EQ(CountOriginalTokens("  \n "), 1);
}

// ---- detokeniser, one rule at a time -----------------------------------------------------------
// Inputs are chosen so that no other rule touches them.

TEST(DetokenizeWikiTextTest, PluralPossessive) {
  EXPECT_EQ(DetokenizeWikiText("the players ' union"), "the players' union");
  EXPECT_EQ(DetokenizeWikiText("was ' x"), "was' x");
}

TEST(DetokenizeWikiTextTest, SlashQuoteDigitRegexIsLiteral) {
  EXPECT_EQ(DetokenizeWikiText("a /' 7/ b"), "a /'[0-9]/ b");
  // Matches do not overlap: the second "/' 2/" shares its first slash with the first match.
  EXPECT_EQ(DetokenizeWikiText("/' 1/' 2/"), "/'[0-9]/' 2/");
  // Without the slashes, or with a non-digit, nothing happens.
  EXPECT_EQ(DetokenizeWikiText("a ' 7 b"), "a ' 7 b");
  EXPECT_EQ(DetokenizeWikiText("/' x/"), "/' x/");
  EXPECT_EQ(DetokenizeWikiText("/' 12/"), "/' 12/");
}

TEST(DetokenizeWikiTextTest, NumberSeparators) {
  EXPECT_EQ(DetokenizeWikiText("1 @,@ 000 @-@ year @.@ 5"), "1,000-year.5");
  EXPECT_EQ(DetokenizeWikiText("x@-@y"), "x@-@y");
}

TEST(DetokenizeWikiTextTest, Punctuation) {
  EXPECT_EQ(DetokenizeWikiText("a : b ; c . d ! e ? f , g"), "a: b; c. d! e? f, g");
  // Non-overlapping: the space after the first dot cannot also start the second match.
  EXPECT_EQ(DetokenizeWikiText("a . . b"), "a. . b");
  // No space after: untouched.
  EXPECT_EQ(DetokenizeWikiText("a ,b"), "a ,b");
}

TEST(DetokenizeWikiTextTest, EachBracketKind) {
  EXPECT_EQ(DetokenizeWikiText("x ( a b ) y"), "x (a b) y");
  EXPECT_EQ(DetokenizeWikiText("x [ a b ] y"), "x [a b] y");
  EXPECT_EQ(DetokenizeWikiText("x { a b } y"), "x {a b} y");
  EXPECT_EQ(DetokenizeWikiText("x \" a b \" y"), "x \"a b\" y");
  EXPECT_EQ(DetokenizeWikiText("x ' a b ' y"), "x 'a b' y");
  EXPECT_EQ(DetokenizeWikiText("(  )"), "()");
  EXPECT_EQ(DetokenizeWikiText("(a)"), "(a)");
}

TEST(DetokenizeWikiTextTest, BracketsJoinTheFirstClosingDelimiter) {
  // Non-greedy and [^)]: the first "(" pairs with the first ")"; the rest has no "(" left.
  EXPECT_EQ(DetokenizeWikiText("( a ( b ) c )"), "(a ( b) c )");
  // Different kinds are independent passes: "[ ( a ) ]" -> "[ (a) ]" -> "[(a)]".
  EXPECT_EQ(DetokenizeWikiText("[ ( a ) ]"), "[(a)]");
  EXPECT_EQ(DetokenizeWikiText("( [ a ) ]"), "([a)]");
  // Unclosed or closed-before-opened: nothing to match.
  EXPECT_EQ(DetokenizeWikiText("x ( a"), "x ( a");
  EXPECT_EQ(DetokenizeWikiText(") ( a"), ") ( a");
}

TEST(DetokenizeWikiTextTest, QuotesPairLeftToRight) {
  EXPECT_EQ(DetokenizeWikiText("x \" a \" y \" b \" z"), "x \"a\" y \"b\" z");
  // An odd quote at the end has no partner.
  EXPECT_EQ(DetokenizeWikiText("\" a \" b \" c"), "\"a\" b \" c");
  // Pairs are (1st, 2nd), (3rd, 4th): the text between the 2nd and the 3rd is left alone, and
  // what lies between a pair need not look like a quotation.
  EXPECT_EQ(DetokenizeWikiText("\"a\" y \"b\""), "\"a\" y \"b\"");
  EXPECT_EQ(DetokenizeWikiText("a\" y \"b"), "a\"y\"b");
}

TEST(DetokenizeWikiTextTest, BracketRegexesSpanLines) {
  EXPECT_EQ(DetokenizeWikiText("(\nfirst\tline\nsecond\n)"), "(first\tline\nsecond)");
  EXPECT_EQ(DetokenizeWikiText("[\r\n a ]"), "[a]");
  EXPECT_EQ(DetokenizeWikiText("{x\n\n}"), "{x}");
  EXPECT_EQ(DetokenizeWikiText("\"\nquoted\n\""), "\"quoted\"");
  // A single quote pairs across a line break, and the newline before it is stripped.
  EXPECT_EQ(DetokenizeWikiText("a ' b\n' c"), "a 'b' c");
}

TEST(DetokenizeWikiTextTest, BracketWhitespaceIsPythonsSet) {
  // \t, U+00A0 and U+2009 are \s in Python 3; U+200B (zero width space) is not.
  EXPECT_EQ(DetokenizeWikiText("(\t\u00a0a\u2009)"), "(a)");
  EXPECT_EQ(DetokenizeWikiText("(\u200ba)"), "(\u200ba)");
  // Multi-byte text inside passes through.
  EXPECT_EQ(DetokenizeWikiText("( caf\u00e9 \u6226 )"), "(caf\u00e9 \u6226)");
}

TEST(DetokenizeWikiTextTest, Headings) {
  EXPECT_EQ(DetokenizeWikiText("= = = = A = = = ="), "==== A ====");
  EXPECT_EQ(DetokenizeWikiText("= = = B = = ="), "=== B ===");
  EXPECT_EQ(DetokenizeWikiText("= = C = ="), "== C ==");
  // Five: "= = = =" first gives "==== =", whose "= =" the last rule joins.
  EXPECT_EQ(DetokenizeWikiText("= = = = ="), "=====");
}

TEST(DetokenizeWikiTextTest, DegreesNewlinesNumbersAndPossessive) {
  EXPECT_EQ(DetokenizeWikiText("35 \u00b0 C"), "35\u00b0C");
  EXPECT_EQ(DetokenizeWikiText("a \nb"), "a\nb");
  EXPECT_EQ(DetokenizeWikiText("a\n b"), "a\nb");
  // One pass each: of two spaces before a newline only one goes.
  EXPECT_EQ(DetokenizeWikiText("a  \nb"), "a \nb");
  EXPECT_EQ(DetokenizeWikiText(" \n \n "), "\n\n");
  EXPECT_EQ(DetokenizeWikiText("the N th"), "the 1 th");
  // Non-overlapping: the second N shares the space between.
  EXPECT_EQ(DetokenizeWikiText(" N N "), " 1 N ");
  EXPECT_EQ(DetokenizeWikiText("John 's"), "John's");
}

// ---- rule order --------------------------------------------------------------------------------

TEST(DetokenizeWikiTextTest, QuoteRegexSeesPunctuationRuleOutput) {
  // " , " -> ", " leaves '" x, "', whose inner spaces the quote rule then strips. (In the other
  // order the quote rule would give '"x ,"' and " , " would no longer match.)
  EXPECT_EQ(DetokenizeWikiText("\" x , \""), "\"x,\"");
  EXPECT_EQ(DetokenizeWikiText("( end . )"), "(end.)");
  EXPECT_EQ(DetokenizeWikiText("\" well @-@ known \""), "\"well-known\"");
}

TEST(DetokenizeWikiTextTest, SingleQuoteRegexSeesPossessiveRuleOutput) {
  // "s '" -> "s'" first, so the quote after "girls" opens a pair with the quote after "game".
  EXPECT_EQ(DetokenizeWikiText("the girls ' game ' rules"), "the girls'game' rules");
  // The quote rule runs before " 's" -> "'s": "'s the boys'" and "' '" are pairs, the last
  // quote is unpaired, then " 's" joins "it".
  EXPECT_EQ(DetokenizeWikiText("it 's the boys ' ' 's'"), "it's the boys' ''s'");
}

TEST(DetokenizeWikiTextTest, WikiTextLikeParagraph) {
  const std::string raw =
      " = = Early life = = \n The town 's 1 @,@ 200 residents ( about 40 @.@ 5 % of the county ) "
      "voted in the \" new \" election . \n";
  EXPECT_EQ(DetokenizeWikiText(raw),
            " == Early life ==\nThe town's 1,200 residents (about 40.5 % of the county) voted in "
            "the \"new\" election.\n");
  EXPECT_EQ(DetokenizeWikiText(""), "");
}

// ---- sliding windows ---------------------------------------------------------------------------

constexpr int32_t kPad = 7;

// tokens[i] = 100 + i, so a target value names its index.
std::vector<int32_t> Ramp(int64_t n) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(100 + i);
  return t;
}

struct Row {
  std::vector<int32_t> inputs, targets;
  std::vector<uint8_t> scored;
};

Row FillRow(const SlidingWindows& win, const std::vector<int32_t>& tokens, int64_t w) {
  const int64_t L = win.seq_length();
  Row r{std::vector<int32_t>(L, -1), std::vector<int32_t>(L, -1), std::vector<uint8_t>(L, 9)};
  win.Fill(tokens, w, kPad, absl::MakeSpan(r.inputs), absl::MakeSpan(r.targets),
           absl::MakeSpan(r.scored));
  return r;
}

TEST(SlidingWindowsTest, SmallCaseByHand) {
  // T = 10, L = 4, o = 2: 9 targets; window 0 scores 4, then 5 more at 2 a window: 1 + 3 windows.
  absl::StatusOr<SlidingWindows> win = SlidingWindows::Create(10, 4, 2);
  ASSERT_TRUE(win.ok()) << win.status();
  ASSERT_EQ(win->num_windows(), 4);
  const std::vector<int32_t> tokens = Ramp(10);
  Row r = FillRow(*win, tokens, 0);
  EXPECT_THAT(r.inputs, ElementsAre(100, 101, 102, 103));
  EXPECT_THAT(r.targets, ElementsAre(101, 102, 103, 104));
  EXPECT_THAT(r.scored, ElementsAre(1, 1, 1, 1));
  r = FillRow(*win, tokens, 1);
  EXPECT_THAT(r.inputs, ElementsAre(102, 103, 104, 105));
  EXPECT_THAT(r.targets, ElementsAre(103, 104, 105, 106));
  EXPECT_THAT(r.scored, ElementsAre(0, 0, 1, 1));
  r = FillRow(*win, tokens, 2);
  EXPECT_THAT(r.inputs, ElementsAre(104, 105, 106, 107));
  EXPECT_THAT(r.targets, ElementsAre(105, 106, 107, 108));
  EXPECT_THAT(r.scored, ElementsAre(0, 0, 1, 1));
  // The last window runs past the end: one real target left to score, then padding.
  r = FillRow(*win, tokens, 3);
  EXPECT_THAT(r.inputs, ElementsAre(106, 107, 108, 109));
  EXPECT_THAT(r.targets, ElementsAre(107, 108, 109, kPad));
  EXPECT_THAT(r.scored, ElementsAre(0, 0, 1, 0));
  EXPECT_EQ(win->start(3), 6);
  EXPECT_EQ(win->scored_begin(3), 2);
  EXPECT_EQ(win->scored_end(3), 3);
}

TEST(SlidingWindowsTest, ShortTextIsOnePaddedWindow) {
  // T = 3 < L = 5: inputs 100, 101, 102 then padding; targets 101, 102.
  absl::StatusOr<SlidingWindows> win = SlidingWindows::Create(3, 5, 2);
  ASSERT_TRUE(win.ok()) << win.status();
  ASSERT_EQ(win->num_windows(), 1);
  const Row r = FillRow(*win, Ramp(3), 0);
  EXPECT_THAT(r.inputs, ElementsAre(100, 101, 102, kPad, kPad));
  EXPECT_THAT(r.targets, ElementsAre(101, 102, kPad, kPad, kPad));
  EXPECT_THAT(r.scored, ElementsAre(1, 1, 0, 0, 0));
}

// SlidingWindows::Create(T, L, o)'s window count; -1 (failing the test) when it refuses them.
int64_t NumWindows(int64_t T, int64_t L, int64_t o) {
  const absl::StatusOr<SlidingWindows> win = SlidingWindows::Create(T, L, o);
  if (!win.ok()) {
    ADD_FAILURE() << win.status();
    return -1;
  }
  return win->num_windows();
}

TEST(SlidingWindowsTest, WindowCountAroundTheSequenceLength) {
  // T - 1 targets; the first window takes L of them.
  EXPECT_EQ(NumWindows(8, 8, 3), 1);   // T = L: 7 targets
  EXPECT_EQ(NumWindows(9, 8, 3), 1);   // T = L + 1: exactly full
  EXPECT_EQ(NumWindows(10, 8, 3), 2);  // one target left over
  EXPECT_EQ(NumWindows(12, 8, 3), 2);  // 3 left: one window of 3
  EXPECT_EQ(NumWindows(13, 8, 3), 3);  // 4 left
  EXPECT_EQ(NumWindows(2, 1, 1), 1);
  EXPECT_EQ(NumWindows(1001, 8, 8), 125);
}

// Every target index 1..T-1 is scored exactly once, each scored target is the real next token of
// its input, padding is never scored, and every window scores something.
void CheckEveryTargetScoredOnce(int64_t T, int64_t L, int64_t o) {
  SCOPED_TRACE(testing::Message() << "T=" << T << " L=" << L << " o=" << o);
  absl::StatusOr<SlidingWindows> win = SlidingWindows::Create(T, L, o);
  ASSERT_TRUE(win.ok()) << win.status();
  const std::vector<int32_t> tokens = Ramp(T);
  std::vector<int> times_scored(T, 0);
  for (int64_t w = 0; w < win->num_windows(); ++w) {
    const Row r = FillRow(*win, tokens, w);
    int64_t scored_here = 0;
    for (int64_t j = 0; j < L; ++j) {
      const int64_t s = win->start(w) + j;
      ASSERT_EQ(r.inputs[j], s < T ? tokens[s] : kPad) << "window " << w << " position " << j;
      ASSERT_EQ(r.targets[j], s + 1 < T ? tokens[s + 1] : kPad) << "window " << w << " pos " << j;
      ASSERT_TRUE(r.scored[j] == 0 || r.scored[j] == 1);
      if (r.scored[j] == 0) continue;
      ASSERT_LT(s + 1, T) << "padding scored in window " << w;
      ++times_scored[r.targets[j] - 100];
      ++scored_here;
      // Only window 0 scores outside the last o positions.
      if (w > 0) {
        EXPECT_GE(j, L - o);
      }
    }
    EXPECT_GT(scored_here, 0) << "window " << w << " scores nothing";
  }
  EXPECT_EQ(times_scored[0], 0);  // token 0 is never a target
  for (int64_t i = 1; i < T; ++i) EXPECT_EQ(times_scored[i], 1) << "target " << i;
}

TEST(SlidingWindowsTest, EveryTargetScoredExactlyOnce) {
  for (int64_t L : {1, 4, 7, 16}) {
    std::vector<int64_t> strides = {1, L};
    if (L > 2) strides.push_back(L / 2);
    if (L > 3) strides.push_back(L - 1);
    for (int64_t o : strides) {
      for (int64_t T :
           {int64_t{2}, int64_t{3}, L - 1, L, L + 1, L + 2, 2 * L + 1, 10 * L + 3, int64_t{257}}) {
        if (T >= 2) CheckEveryTargetScoredOnce(T, L, o);
      }
    }
  }
}

TEST(SlidingWindowsTest, BadArgumentsAreInvalidArgument) {
  EXPECT_EQ(SlidingWindows::Create(1, 4, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SlidingWindows::Create(10, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SlidingWindows::Create(10, 4, 0).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status s = SlidingWindows::Create(10, 4, 5).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("stride (overlapping_eval) 5"));
}

TEST(SlidingWindowsDeathTest, FillChecksItsArguments) {
  ASSERT_OK_AND_ASSIGN(const SlidingWindows win, SlidingWindows::Create(10, 4, 2));
  const std::vector<int32_t> tokens = Ramp(10);
  std::vector<int32_t> a(4), b(4);
  std::vector<uint8_t> m(4);
  EXPECT_DEATH(win.Fill(tokens, 4, kPad, absl::MakeSpan(a), absl::MakeSpan(b), absl::MakeSpan(m)),
               "window 4 of 4");
  EXPECT_DEATH(win.Fill(Ramp(9), 0, kPad, absl::MakeSpan(a), absl::MakeSpan(b), absl::MakeSpan(m)),
               "");
  std::vector<int32_t> short_row(3);
  EXPECT_DEATH(
      win.Fill(tokens, 0, kPad, absl::MakeSpan(short_row), absl::MakeSpan(b), absl::MakeSpan(m)),
      "");
}

// ---- result formulas ---------------------------------------------------------------------------

TEST(WikiTextPerplexityTest, FormulasByHand) {
  // S = 23, T = 11, T_o = 6: loss = 2.3, ratio = 10 / 5 = 2, adjusted exponent = 4.6.
  absl::StatusOr<WikiTextResult> r = WikiTextPerplexity(23.0, 11, 6);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->loss, 2.3, 1e-15);
  EXPECT_DOUBLE_EQ(r->token_ratio, 2.0);
  EXPECT_NEAR(r->ppl, 9.974182454814718, 1e-12);
  EXPECT_NEAR(r->adjusted_ppl, 99.48431564193378, 1e-11);
}

TEST(WikiTextPerplexityTest, ExponentsAreCappedAtTwenty) {
  // loss 5 is below the cap, the adjusted exponent 50 / 1 is above it.
  absl::StatusOr<WikiTextResult> r = WikiTextPerplexity(50.0, 11, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->ppl, 148.4131591025766, 1e-10);
  EXPECT_NEAR(r->adjusted_ppl, 485165195.4097903, 1e-5);
  r = WikiTextPerplexity(1e6, 3, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->ppl, 485165195.4097903, 1e-5);
  EXPECT_NEAR(r->adjusted_ppl, 485165195.4097903, 1e-5);
  // A perfect model.
  r = WikiTextPerplexity(0.0, 3, 3);
  EXPECT_EQ(r->ppl, 1.0);
  EXPECT_EQ(r->adjusted_ppl, 1.0);
}

TEST(WikiTextPerplexityTest, BadInputsAreInvalidArgument) {
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(WikiTextPerplexity(bad, 11, 6).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(WikiTextPerplexity(1.0, 1, 6).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status s = WikiTextPerplexity(1.0, 11, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("T_o = 1"));
}

}  // namespace
}  // namespace eval
}  // namespace mt
