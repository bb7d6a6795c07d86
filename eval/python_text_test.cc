#include "eval/python_text.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace eval {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Every member of Python's whitespace set, as UTF-8.
const char* const kAllSpaces[] = {
    "\t",     "\n",     "\v",     "\f",     "\r",     "\x1c",   "\x1d",   "\x1e",
    "\x1f",   " ",      "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002",
    "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
    "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
};

TEST(PythonTextTest, RecognisesEveryPythonSpaceAtEitherEnd) {
  for (const char* space : kAllSpaces) {
    const std::string sp = space;
    EXPECT_EQ(PySpacePrefix(sp + "x"), sp.size()) << sp;
    EXPECT_EQ(PySpaceSuffix("x" + sp), sp.size()) << sp;
    EXPECT_EQ(PyStrip(sp + "a b" + sp + sp), "a b") << sp;
    EXPECT_THAT(PySplit("a" + sp + "b"), ElementsAre("a", "b")) << sp;
  }
}

TEST(PythonTextTest, NeighboursOfTheSetAreNotSpaces) {
  // U+0008, U+000E, U+001B, U+0021, U+0084, U+00A1, U+00C2, U+200B (zero width space), U+200C,
  // U+2027, U+202A, U+205E, U+3001, U+1681 and a non-breaking hyphen U+2011.
  for (const char* c : {"\b", "\x0e", "\x1b", "!", "\u0084", "\u00a1", "\u00c2", "\u200b", "\u200c",
                        "\u2027", "\u202a", "\u205e", "\u3001", "\u1681", "\u2011"}) {
    EXPECT_EQ(PySpacePrefix(c), 0u) << c;
    EXPECT_EQ(PySpaceSuffix(c), 0u) << c;
  }
  EXPECT_EQ(PySpacePrefix(""), 0u);
  EXPECT_EQ(PySpaceSuffix(""), 0u);
  // Truncated sequences are not spaces.
  EXPECT_EQ(PySpacePrefix("\xc2"), 0u);
  EXPECT_EQ(PySpacePrefix("\xe2\x80"), 0u);
  EXPECT_EQ(PySpaceSuffix("\x80"), 0u);
}

TEST(PythonTextTest, StripKeepsInnerWhitespace) {
  EXPECT_EQ(PyStrip(" \t\n a  b \r\n"), "a  b");
  EXPECT_EQ(PyStrip("ab"), "ab");
  EXPECT_EQ(PyStrip(" \n\u3000 "), "");
  EXPECT_EQ(PyStrip(""), "");
  // A multi-byte non-space character next to the edge is kept whole (U+00E9, U+2011).
  EXPECT_EQ(PyStrip("\u00a0\u00e9x\u2011\u2009"), "\u00e9x\u2011");
}

TEST(PythonTextTest, SplitDropsEmptyPieces) {
  EXPECT_THAT(PySplit("  the  cat\n\nsat\t"), ElementsAre("the", "cat", "sat"));
  EXPECT_THAT(PySplit("one"), ElementsAre("one"));
  EXPECT_THAT(PySplit(""), IsEmpty());
  EXPECT_THAT(PySplit(" \n "), IsEmpty());
  EXPECT_THAT(PySplit("caf\u00e9\u00a0na\u00efve"), ElementsAre("caf\u00e9", "na\u00efve"));
}

TEST(PythonTextTest, CollapseSpacesMakesEachRunOneSpace) {
  EXPECT_EQ(PyCollapseSpaces("a \n\t b  c"), "a b c");
  EXPECT_EQ(PyCollapseSpaces("  a  "), " a ");
  EXPECT_EQ(PyCollapseSpaces("x\u00a0\u2009y"), "x y");
  EXPECT_EQ(PyCollapseSpaces("abc"), "abc");
  EXPECT_EQ(PyCollapseSpaces(""), "");
  EXPECT_EQ(PyCollapseSpaces("\n"), " ");
}

}  // namespace
}  // namespace eval
}  // namespace mt
