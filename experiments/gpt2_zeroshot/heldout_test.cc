#include "experiments/gpt2_zeroshot/heldout.h"

#include "eval/wikitext.h"
#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(ToWikiTextTokensTest, HandWrittenCases) {
  EXPECT_EQ(ToWikiTextTokens("A well-known fact (3.5 kg), isn't it?"),
            "A well @-@ known fact ( 3 @.@ 5 kg ) , isn't it ?");
  EXPECT_EQ(ToWikiTextTokens("He said \"Stop!\"\n\t twice; 1,000 dogs ate John's bones..."),
            "He said \" Stop ! \" twice ; 1 @,@ 000 dogs ate John 's bones...");
  // Edges: a lone punctuation word stays; a hyphen or comma not between the right characters
  // stays; -- is a word of its own.
  EXPECT_EQ(ToWikiTextTokens("  -- Mark Twain, 1,x -x a- ! "), "-- Mark Twain , 1,x -x a- !");
  EXPECT_EQ(ToWikiTextTokens(""), "");
}

TEST(ToWikiTextTokensTest, HarnessDetokeniserGivesTheTextBack) {
  const std::string a = "A well-known fact (3.5 kg), isn't it?";
  const std::string b = "He said \"Stop!\" twice; 1,000 dogs ate John's bones...";
  // " \n D1 \n \n D2 \n \n": " \n" -> "\n" then "\n " -> "\n" leave the paragraphs.
  EXPECT_EQ(eval::DetokenizeWikiText(WikiTextFile({a, "   ", b})), "\n" + a + "\n\n" + b + "\n\n");
  EXPECT_EQ(WikiTextFile({"x-y", ""}), " \n x @-@ y \n \n");
}

TEST(ToLambadaTextTest, LastWordCleanedAndChecked) {
  EXPECT_EQ(ToLambadaText("Never put off till tomorrow\nwhat you can do today.", 5).value(),
            "Never put off till tomorrow what you can do today");
  EXPECT_EQ(ToLambadaText("-- Anon.\" ", 2).value(), "-- Anon");
  EXPECT_FALSE(ToLambadaText("Never put off till tomorrow what you can do today.", 11));
  EXPECT_FALSE(ToLambadaText("It costs $5.", 2));  // Not all letters.
  EXPECT_FALSE(ToLambadaText("Plan b", 2));        // One letter.
  EXPECT_FALSE(ToLambadaText("  ", 0));
}

}  // namespace
}  // namespace experiments
}  // namespace mt
