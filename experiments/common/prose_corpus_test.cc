#include "experiments/common/prose_corpus.h"

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(ProseCorpusTest, SplitsFortunes) {
  EXPECT_EQ(SplitFortunes("One\n  fortune.\n%\n%\nTwo.\n%\n"),
            (std::vector<std::string>{"One fortune.", "Two."}));
}

TEST(ProseCorpusTest, SplitsTheBibleIntoRunsOfVerses) {
  const char* text =
      "\nGenesis 1\n\n  1 In the beginning God created the heaven and the earth.\n"
      "  2 And the earth was without form, and void; and darkness was upon the face of\n"
      "the deep.\n  3 And God said, Let there be light.\n\nGenesis 2\n\n"
      "  1 Thus the heavens were finished.\n";
  // At least 12 words a document: verse 1 (10 words) + verse 2; verse 3 (7 words) is the
  // chapter's tail and joins it; chapter 2 is one short document.
  EXPECT_EQ(SplitBible(text, 12),
            (std::vector<std::string>{
                "In the beginning God created the heaven and the earth. And the earth was "
                "without form, and void; and darkness was upon the face of the deep. And God "
                "said, Let there be light.",
                "Thus the heavens were finished."}));
}

TEST(ProseCorpusTest, SplitsJargonParagraphs) {
  const char* text =
      "Preface text that is not an entry at all, however long it may be.\n\n"
      "   :hack: n.\n\n   1. Originally, a quick job that produces what is needed,\n"
      "   but not well. See {kludge}.\n\n   Short one.\n";
  EXPECT_EQ(SplitJargon(text, 5),
            (std::vector<std::string>{
                "1. Originally, a quick job that produces what is needed, but not well. See "
                "kludge."}));
}

TEST(ProseCorpusTest, HeldOutDocumentsShareNoLongRunWithTraining) {
  EXPECT_EQ(NormalizedWords("It's THE end--really."),
            (std::vector<std::string>{"it", "s", "the", "end", "really"}));
  std::vector<ProseDocument> docs;
  for (int i = 0; i < 40; ++i) {
    docs.push_back({"test", "document number " + std::to_string(i) + " says a b c d e"});
  }
  // With 4-word runs, "says a b c" is in every document: every held-out one is dropped.
  HeldOutSplit s = SplitHeldOut(docs, 4, 1, /*dedup_words=*/4);
  EXPECT_EQ(s.train.size(), 30u);
  EXPECT_TRUE(s.heldout.empty());
  EXPECT_EQ(s.dropped_overlapping, 10);
  // With 7-word runs each document's number makes it unique: all 10 kept.
  s = SplitHeldOut(docs, 4, 1, /*dedup_words=*/7);
  EXPECT_EQ(s.heldout.size(), 10u);
  EXPECT_EQ(s.dropped_overlapping, 0);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
