#include "data/preprocessing/sentence_splitter.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view s : SplitSentences(text)) out.emplace_back(s);
  return out;
}

using V = std::vector<std::string>;

TEST(SentenceSplitterTest, TerminatorsBeforeCapitals) {
  EXPECT_EQ(Split("Hello world. This is a test."), (V{"Hello world.", "This is a test."}));
  EXPECT_EQ(Split("Wait... What? Really!  Yes."), (V{"Wait...", "What?", "Really!", "Yes."}));
  EXPECT_EQ(Split("What?! No."), (V{"What?!", "No."}));
  EXPECT_EQ(Split("One.\tTwo.\nThree."), (V{"One.", "Two.", "Three."}));
}

TEST(SentenceSplitterTest, NoSplitWithoutWhitespaceOrCapital) {
  EXPECT_EQ(Split("Pi is 3.14 today. ok then."), (V{"Pi is 3.14 today. ok then."}));
  EXPECT_EQ(Split("What?!Really."), (V{"What?!Really."}));
  EXPECT_EQ(Split("Call at 5. 6 is too late."), (V{"Call at 5. 6 is too late."}));
  EXPECT_EQ(Split("End."), (V{"End."}));
}

TEST(SentenceSplitterTest, AbbreviationsAndInitials) {
  EXPECT_EQ(Split("Mr. Smith went to Washington. He left."),
            (V{"Mr. Smith went to Washington.", "He left."}));
  EXPECT_EQ(Split("J. R. R. Tolkien wrote books. Many."),
            (V{"J. R. R. Tolkien wrote books.", "Many."}));
  EXPECT_EQ(Split("Use a tool, e.g. Bazel. It works."),
            (V{"Use a tool, e.g. Bazel.", "It works."}));
  EXPECT_EQ(Split("Dr. No. Really."), (V{"Dr. No. Really."}));  // Both are abbreviations.
  // Abbreviations are case-sensitive and only suppress a single '.'.
  EXPECT_EQ(Split("I said no. Then I left."), (V{"I said no.", "Then I left."}));
  EXPECT_EQ(Split("Ask Dr.. Then go."), (V{"Ask Dr..", "Then go."}));
  EXPECT_EQ(Split("Hi Mr! Go."), (V{"Hi Mr!", "Go."}));
}

TEST(SentenceSplitterTest, QuotesAndBrackets) {
  EXPECT_EQ(Split("He said \"Stop.\" Then he left."), (V{"He said \"Stop.\"", "Then he left."}));
  EXPECT_EQ(Split("It costs $5. (Cheap.) Fine."), (V{"It costs $5.", "(Cheap.)", "Fine."}));
  EXPECT_EQ(Split("Done. \"Next,\" he said."), (V{"Done.", "\"Next,\" he said."}));
  EXPECT_EQ(Split("He said \xE2\x80\x9CGo.\xE2\x80\x9D Then he went."),
            (V{"He said \xE2\x80\x9CGo.\xE2\x80\x9D", "Then he went."}));
  EXPECT_EQ(Split("End. \xE2\x80\x98Quoted\xE2\x80\x99 start."),
            (V{"End.", "\xE2\x80\x98Quoted\xE2\x80\x99 start."}));
  EXPECT_EQ(Split("Odd.) Next."), (V{"Odd.)", "Next."}));
}

TEST(SentenceSplitterTest, ParagraphBreaks) {
  EXPECT_EQ(Split("line one\n\nline two"), (V{"line one", "line two"}));
  EXPECT_EQ(Split("a\n \r\nb"), (V{"a", "b"}));
  EXPECT_EQ(Split("a\nb"), (V{"a\nb"}));
  EXPECT_EQ(Split("end. \n\n lower case"), (V{"end.", "lower case"}));
}

TEST(SentenceSplitterTest, TrimsAndDropsEmpty) {
  EXPECT_EQ(Split(""), V{});
  EXPECT_EQ(Split(" \n\t "), V{});
  EXPECT_EQ(Split("  Hi.  "), (V{"Hi."}));
  EXPECT_EQ(Split("\n\n\nA.\n\n\n"), (V{"A."}));
}

TEST(SentenceSplitterTest, AbbreviationListIsNonEmpty) {
  bool has_mr = false;
  for (absl::string_view a : SentenceAbbreviations()) has_mr |= a == "Mr";
  EXPECT_TRUE(has_mr);
}

bool IsSpaceChar(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// On random texts over a small alphabet: sentences are in-order, non-overlapping views of the
// text, trimmed, and everything between them is whitespace.
TEST(SentenceSplitterTest, PropertiesOnRandomText) {
  const std::string alphabet = "aB .!?\n\"'()Mr";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text(rng() % 40, ' ');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    const std::vector<absl::string_view> sentences = SplitSentences(text);
    size_t pos = 0;
    for (absl::string_view s : sentences) {
      ASSERT_FALSE(s.empty());
      ASSERT_GE(s.data(), text.data() + pos) << text;
      ASSERT_LE(s.data() + s.size(), text.data() + text.size());
      for (const char* p = text.data() + pos; p < s.data(); ++p) ASSERT_TRUE(IsSpaceChar(*p));
      ASSERT_FALSE(IsSpaceChar(s.front()));
      ASSERT_FALSE(IsSpaceChar(s.back()));
      pos = static_cast<size_t>(s.data() + s.size() - text.data());
    }
    for (size_t p = pos; p < text.size(); ++p) ASSERT_TRUE(IsSpaceChar(text[p])) << text;
  }
}

}  // namespace
}  // namespace data
}  // namespace mt
