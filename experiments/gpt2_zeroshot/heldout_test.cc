#include "experiments/gpt2_zeroshot/heldout.h"

#include "data/indexed/indexed_dataset.h"
#include "data/tokenizers/factory.h"
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

TEST(LambadaCopyPassageTest, LongestBeginningEndingWithAWordSeenBefore) {
  auto any = [](absl::string_view) { return true; };
  EXPECT_EQ(LambadaCopyPassage("The cat sat. A dog sat. Then the cat ran off.", 2, any).value(),
            "The cat sat. A dog sat");
  // The whole text when its own last word repeats one before it (case kept, edges stripped).
  EXPECT_EQ(LambadaCopyPassage("\"Bob\" waved; then (Alice) called Bob!", 2, any).value(),
            "\"Bob\" waved; then (Alice) called Bob");
  EXPECT_FALSE(LambadaCopyPassage("The Cat sat on a mat. Then we saw the cat.", 2, any));
  EXPECT_EQ(LambadaCopyPassage("ab b ab. c d ab.", 6, any).value(), "ab b ab. c d ab");
  EXPECT_FALSE(LambadaCopyPassage("ab b ab. c d ab.", 7, any));  // Too few words.
  // A sentence end inside a word does not count; the budget drops the longer passage.
  EXPECT_EQ(LambadaCopyPassage("go now. then go.x stop go. z go", 2,
                               [](absl::string_view t) { return t.size() <= 26; })
                .value(),
            "go now. then go.x stop go");
  EXPECT_FALSE(LambadaCopyPassage("go now. then go.", 2, [](absl::string_view) { return false; }));
}

TEST(WriteHeldOutTextsTest, CopyTargetsWriteOnePassagePerDocument) {
  auto gpt2 = data::CreateTokenizer("gpt2");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  const std::vector<std::string> texts = {
      "one two three four five six seven eight nine ten two. more words here now.",
      "no word here comes back at the end of this text at all really"};
  auto files = WriteHeldOutTexts(texts, 128, **gpt2, testing::TempDir(), true);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->lambada_examples, 1);
  EXPECT_EQ(files->lambada_lines[0], "one two three four five six seven eight nine ten two");
}

// The splits of an indexed dataset: the training documents' text; the test split's LAMBADA lines,
// every document's own last word, or with copy_targets only the documents with a copy passage.
TEST(WriteHeldOutTest, TrainingTextAndCopyTargetsOfTheSplits) {
  auto gpt2 = data::CreateTokenizer("gpt2");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  const std::string prefix = testing::TempDir() + "/heldout_split";
  auto writer = data::IndexedDatasetWriter::CreateForVocab(prefix, (*gpt2)->vocab_size());
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (const std::string& text :
       {std::string("the training document, never written out at all here ok"),
        std::string("one two three four five six seven eight nine ten two. more words here now."),
        std::string("no word here comes back at the end of this text at all really")}) {
    auto ids = (*gpt2)->Encode(text);
    ASSERT_TRUE((*writer)->AddDocument(ids).ok());
  }
  ASSERT_TRUE((*writer)->Finalize().ok());
  // "1,0,2": the first document trains, the other two are the test split.
  auto train = DecodeSplit(prefix, "1,0,2", 0, **gpt2);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(*train,
            std::vector<std::string>{"the training document, never written out at all here ok"});
  EXPECT_FALSE(DecodeSplit(prefix, "1,0,2", 3, **gpt2).ok());
  auto last = WriteHeldOut(prefix, "1,0,2", 10, 128, **gpt2, testing::TempDir());
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->first_document, 1);
  EXPECT_EQ(last->lambada_lines,
            (std::vector<std::string>{
                "one two three four five six seven eight nine ten two. more words here now",
                "no word here comes back at the end of this text at all really"}));
  auto copy = WriteHeldOut(prefix, "1,0,2", 10, 128, **gpt2, testing::TempDir(), true);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->lambada_lines,
            std::vector<std::string>{"one two three four five six seven eight nine ten two"});
}

}  // namespace
}  // namespace experiments
}  // namespace mt
