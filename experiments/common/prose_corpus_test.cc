#include "experiments/common/prose_corpus.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "experiments/common/corpus_vocab.h"
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

// The characters (byte order, each then its "##" form), then the words of two or more characters
// by falling count, ties in byte order, at most max_words of them: worked out by hand.
TEST(CorpusVocabTest, CharactersThenTheMostFrequentWords) {
  auto basic = data::WordPiece::LoadDefault();
  ASSERT_TRUE(basic.ok()) << basic.status();
  const std::vector<std::string> vocab =
      CorpusVocab({"The cat, the CAT sat.", "cats"}, **basic, /*max_words=*/3);
  EXPECT_EQ(vocab, (std::vector<std::string>{
                       "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",",   "##,", ".",
                       "##.",   "a",     "##a",   "c",     "##c",    "e",   "##e", "h",
                       "##h",   "s",     "##s",   "t",     "##t",    "cat", "the", "cats"}));
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The dataset holds the training text tokenised with the written vocabulary: frequent words whole,
// the rest spelled; a second call finds it current and keeps it.
TEST(CorpusVocabTest, TokenisesTheTrainingTextWithIt) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/corpus_vocab";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/prose_train.jsonl") << "{\"text\":\"The cat sat. The cat ran.\"}\n";
  ProseCorpus corpus;
  corpus.bert_prefix = dir + "/prose_bert_text_sentence";
  corpus.train = {{"bible", "The cat sat. The cat ran."}};
  auto d = BuildCorpusVocabDataset(corpus, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  auto wp = data::WordPiece::Load(d->vocab_file);
  ASSERT_TRUE(wp.ok()) << wp.status();
  EXPECT_EQ(d->vocab_size, (*wp)->vocab_size());
  EXPECT_EQ((*wp)->token(d->vocab_size - 2), "cat");  // Twice each; "cat" < "the".
  EXPECT_EQ((*wp)->token(d->vocab_size - 1), "the");
  std::vector<int32_t> ids;
  (*wp)->EncodeAppend("The cat sat.", &ids);
  std::vector<std::string> tokens;
  for (int32_t id : ids) tokens.push_back((*wp)->token(id));
  EXPECT_EQ(tokens, (std::vector<std::string>{"the", "cat", "s", "##a", "##t", "."}));
  // 2 sentences of 6 tokens, as uint16.
  const std::string bin = ReadAll(d->bert_prefix + ".bin");
  ASSERT_EQ(bin.size(), 12 * sizeof(uint16_t));
  for (size_t i = 0; i < ids.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, bin.data() + 2 * i, 2);
    EXPECT_EQ(v, ids[i]) << i;
  }
  const auto written = std::filesystem::last_write_time(d->bert_prefix + ".bin");
  ASSERT_TRUE(BuildCorpusVocabDataset(corpus, 2).ok());
  EXPECT_EQ(std::filesystem::last_write_time(d->bert_prefix + ".bin"), written);
  EXPECT_EQ(BuildCorpusVocabDataset(corpus, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
