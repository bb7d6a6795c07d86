#include "data/tokenizers/wordpiece.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "data/tokenizers/assets.h"
#include "data/tokenizers/test_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Ids below were looked up by hand in the installed vocab.txt (line number - 1), and every
// WordPiece split was worked through greedily against it; comments name the pieces.
const WordPiece& Bert() {
  static const WordPiece* const tok = [] {
    absl::StatusOr<std::unique_ptr<WordPiece>> t = WordPiece::LoadDefault();
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? t->release() : nullptr;
  }();
  return *tok;
}

std::string TempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST(WordPieceTest, VocabularyAndSpecialTokens) {
  const WordPiece& t = Bert();
  EXPECT_EQ(t.name(), "bert");
  EXPECT_EQ(t.vocab_size(), 30522);
  const SpecialTokens s = t.special_tokens();
  EXPECT_EQ(s.pad, 0);
  EXPECT_EQ(s.unk, 100);
  EXPECT_EQ(s.cls, 101);
  EXPECT_EQ(s.sep, 102);
  EXPECT_EQ(s.mask, 103);
  EXPECT_EQ(s.eod, kNoToken);
  EXPECT_EQ(t.token(1), "[unused0]");
  EXPECT_EQ(t.token(999), "!");
  EXPECT_EQ(t.token(1996), "the");
  EXPECT_EQ(t.token(2015), "##s");
  EXPECT_EQ(t.TokenId("##berries"), 20968);
  EXPECT_EQ(t.TokenId("berries"), 22681);
  EXPECT_EQ(t.TokenId("##unaffable"), kNoToken);
}

TEST(WordPieceTest, GreedyLongestMatchWithContinuations) {
  const WordPiece& t = Bert();
  EXPECT_THAT(t.Encode("hello world"), ElementsAre(7592, 2088));
  EXPECT_THAT(t.Encode("the quick brown fox"), ElementsAre(1996, 4248, 2829, 4419));
  // una ##ffa ##ble: no "unaf..." entry is longer than "una", and "##ffa" is the longest
  // continuation of "ffable" (no "##ffab", "##ffabl", "##ffable").
  EXPECT_THAT(t.Encode("unaffable"), ElementsAre(14477, 20961, 3468));
  EXPECT_THAT(t.Encode("strawberries"), ElementsAre(13137, 20968));  // straw ##berries
  // Hiragana is not split per character, and NFD takes the dakuten (U+3099, Mn) off "が":
  // あ ##り ##か ##と ##う.
  EXPECT_THAT(t.Encode("ありがとう"), ElementsAre(1646, 30212, 30177, 30192, 30174));
  // An uncoverable tail makes the whole word [UNK], not "hello [UNK]".
  EXPECT_THAT(t.Encode("hello☃ ☃"), ElementsAre(100, 100));
  EXPECT_THAT(t.Encode("€"), ElementsAre(1574));  // A symbol (Sc), not punctuation: a word.
}

TEST(WordPieceTest, LowerCasingAndAccentStripping) {
  const WordPiece& t = Bert();
  EXPECT_THAT(t.Encode("Héllo WORLD"), ElementsAre(7592, 2088));
  EXPECT_THAT(t.Encode("He\u0301llo"), ElementsAre(7592));  // Already decomposed.
  EXPECT_THAT(t.Encode("Über naïve RÉSUMÉ"), ElementsAre(19169, 15743, 13746));
  // 'İ' lower-cases to "i" + U+0307 (full case mapping), and the mark is stripped.
  EXPECT_THAT(t.Encode("İstanbul"), ElementsAre(9960));
  // Final sigma: "ΟΔΟΣ" -> "οδος" = ο ##δ ##ος (with ς, id 15297).
  EXPECT_THAT(t.Encode("ΟΔΟΣ"), ElementsAre(1169, 29722, 15297));
}

TEST(WordPieceTest, PunctuationSplitting) {
  const WordPiece& t = Bert();
  EXPECT_THAT(t.BasicTokenize("don't"), ElementsAre("don", "'", "t"));
  EXPECT_THAT(t.Encode("don't"), ElementsAre(2123, 1005, 1056));
  EXPECT_THAT(t.Encode("hello, world!"), ElementsAre(7592, 1010, 2088, 999));
  // ASCII symbols count as punctuation ($ is Sc, ^ ` Sk, ~ + Sm), as do all Unicode P*.
  EXPECT_THAT(t.BasicTokenize("$100 a^b`c~d+e"),
              ElementsAre("$", "100", "a", "^", "b", "`", "c", "~", "d", "+", "e"));
  EXPECT_THAT(t.Encode("$100"), ElementsAre(1002, 2531));
  EXPECT_THAT(t.Encode("“quoted”"), ElementsAre(1523, 9339, 1524));
  EXPECT_THAT(t.BasicTokenize("x§y…z"), ElementsAre("x", "§", "y", "…", "z"));
  EXPECT_THAT(t.BasicTokenize("a€b"), ElementsAre("a€b"));
  // Special tokens in text are not special: brackets split off, "cls" is cl ##s.
  EXPECT_THAT(t.Encode("[CLS] hi [MASK]"),
              ElementsAre(1031, 18856, 2015, 1033, 7632, 1031, 7308, 1033));
}

TEST(WordPieceTest, CjkCharactersAreSplitOut) {
  const WordPiece& t = Bert();
  EXPECT_THAT(t.BasicTokenize("中国人abc日本語"),
              ElementsAre("中", "国", "人", "abc", "日", "本", "語"));
  EXPECT_THAT(t.Encode("中国人"), ElementsAre(1746, 1799, 1756));
  // Hangul is not in BERT's CJK blocks, and NFD decomposes its syllables into conjoining jamo
  // (Lo, so they stay): 안 = U+110B U+1161 U+11AB, 녕 = U+1102 U+1167 U+11BC, ...
  EXPECT_THAT(t.BasicTokenize("안녕하세요"),
              ElementsAre("\u110B\u1161\u11AB\u1102\u1167\u11BC\u1112\u1161\u1109\u1166"
                          "\u110B\u116D"));
}

TEST(WordPieceTest, ControlCharactersAndWhitespace) {
  const WordPiece& t = Bert();
  // NUL, U+FFFD, Cc and Cf characters vanish, joining their neighbours.
  EXPECT_THAT(t.Encode(std::string("hel\0lo", 6)), ElementsAre(7592));
  EXPECT_THAT(t.Encode("hel\x7flo he\u200bllo hel\ufffdlo"), ElementsAre(7592, 7592, 7592));
  // U+0085 is a control character to BERT, not whitespace: hello ##world.
  EXPECT_THAT(t.Encode("hello\u0085world"), ElementsAre(7592, 11108));
  // Tabs, newlines, Zs (NBSP, U+3000) and U+2028 separate words.
  EXPECT_THAT(t.BasicTokenize("a\tb\r\nc\u00a0d\u3000e\u2028f  "),
              ElementsAre("a", "b", "c", "d", "e", "f"));
  EXPECT_THAT(t.Encode(" \t\n "), IsEmpty());
  // Invalid UTF-8 bytes are dropped (Python decodes with errors="ignore").
  EXPECT_THAT(t.Encode("hel\xfflo"), ElementsAre(7592));
}

TEST(WordPieceTest, WordsLongerThan100CodePointsAreUnknown) {
  const WordPiece& t = Bert();
  const std::string a100(100, 'a');
  const std::vector<int32_t> ids = t.Encode(a100);
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(*t.Decode(ids), a100);
  EXPECT_THAT(t.Encode(a100 + "a"), ElementsAre(100));
  // The limit counts code points after accent stripping, not bytes: 60 x "é" (NFD: 120 code
  // points, 180 bytes) is "e" x 60 and fits.
  std::string e60;
  for (int i = 0; i < 60; ++i) e60 += "e\u0301";
  EXPECT_EQ(*t.Decode(t.Encode(e60)), std::string(60, 'e'));
}

TEST(WordPieceTest, DecodeJoinsContinuations) {
  const WordPiece& t = Bert();
  EXPECT_EQ(*t.Decode({101, 14477, 20961, 3468, 1010, 2088, 102}), "[CLS] unaffable , world [SEP]");
  EXPECT_EQ(*t.Decode({2015, 2015}), "##ss");  // A leading continuation keeps its "##".
  EXPECT_EQ(*t.Decode({}), "");
  absl::StatusOr<std::string> bad = t.Decode({7592, 30522});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("id 30522 at position 1"));
  EXPECT_EQ(t.Decode({-1}).status().code(), absl::StatusCode::kInvalidArgument);
}

// The whole varied test text (prose, code, many scripts, emoji, odd whitespace, controls)
// against testdata/bert_reference.py: BERT's algorithm with Python's unicodedata.
TEST(WordPieceTest, MatchesPythonReferenceOnLargeVariedText) {
  constexpr char kPython[] = "/usr/bin/python3";
  ASSERT_EQ(access(kPython, X_OK), 0) << kPython << " not found: the BERT reference runs under "
                                      << "Python 3 (run tools/setup.sh)";
  absl::StatusOr<std::string> text = testing::VariedText(/*prose_bytes=*/260000,
                                                         /*generated_bytes=*/180000,
                                                         /*seed=*/20261130);
  ASSERT_TRUE(text.ok()) << text.status();
  const std::string in = TempFile("bert_text.txt", *text);
  const std::string out = TempFile("bert_reference.txt", "");
  const std::string cmd = absl::StrCat(kPython, " ", std::getenv("TEST_SRCDIR"),
                                       "/megatron_cpp/data/tokenizers/testdata/bert_reference.py ",
                                       *BertVocabTxt(), " ", in, " ", out);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference failed: " << cmd;
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> want;
  for (absl::string_view field :
       absl::StrSplit(ss.str(), absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    int32_t id;
    ASSERT_TRUE(absl::SimpleAtoi(field, &id)) << field;
    want.push_back(id);
  }
  const WordPiece& t = Bert();
  const std::vector<int32_t> got = t.Encode(*text);
  ASSERT_GT(want.size(), 100000u);
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i < got.size() || i < want.size()) {
    const size_t lo = i < 6 ? 0 : i - 6;
    auto window = [&](const std::vector<int32_t>& ids) {
      std::vector<std::string> tokens;
      for (size_t k = lo; k < std::min(ids.size(), i + 6); ++k) tokens.push_back(t.token(ids[k]));
      return absl::StrJoin(tokens, " ");
    };
    FAIL() << "first difference at id " << i << " of " << want.size() << " (ours has " << got.size()
           << ")\n  ours:      " << window(got) << "\n  reference: " << window(want);
  }
}

TEST(WordPieceTest, SmallVocabularyFile) {
  // Ids are line numbers; duplicates: the later line wins, as in BERT's load_vocab.
  const std::string path =
      TempFile("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nplay\n##ing\n##s\n##play\nplay\n");
  absl::StatusOr<std::unique_ptr<WordPiece>> t = WordPiece::Load(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 10);
  EXPECT_THAT((*t)->Encode("Playing plays PLAYPLAY xplay"), ElementsAre(9, 6, 9, 7, 9, 8, 1));
}

TEST(WordPieceTest, LoadErrors) {
  EXPECT_EQ(WordPiece::Load("/nonexistent/vocab.txt").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(WordPiece::Load(TempFile("empty.txt", "")).status().code(),
            absl::StatusCode::kDataLoss);
  absl::Status s = WordPiece::Load(TempFile("nomask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("[MASK]"));
  EXPECT_THAT(s.message(), HasSubstr("nomask.txt"));
}

}  // namespace
}  // namespace mt::data
