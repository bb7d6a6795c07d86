#include "eval/lambada.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/tokenizers/testutil.h"
#include "eval/testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace eval {
namespace {

using data::testing::Gpt2;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string Fixture() { return TestDataPath("lambada_small.jsonl"); }

std::string WriteTemp(const std::string& name, const std::string& contents) {
  return WriteTestFile("lambada_" + name, contents);
}

// ---- reader ------------------------------------------------------------------------------------

TEST(ReadLambadaTextsTest, ReadsTheFixtureInOrder) {
  absl::StatusOr<std::vector<std::string>> texts = ReadLambadaTexts(Fixture());
  ASSERT_TRUE(texts.ok()) << texts.status();
  ASSERT_EQ(texts->size(), 4u);
  EXPECT_EQ((*texts)[0],
            "The storm kept us inside for three days, so on the fourth morning we ran down to the "
            "beach");
  EXPECT_EQ((*texts)[3],
            "The bell rang twice and the class waited.\nThen the teacher smiled and said  \"go\"");
}

TEST(ReadLambadaTextsTest, CrlfLinesAndNoFinalNewline) {
  const std::string path =
      WriteTemp("crlf.jsonl", "{\"text\": \"a b\", \"id\": 3}\r\n{\"text\": \"c d\"}");
  EXPECT_THAT(ReadLambadaTexts(path).value(), ElementsAre("a b", "c d"));
}

// The error of a file holding `contents`: InvalidArgument naming FILE:LINE and `what`.
void ExpectLineError(const std::string& name, const std::string& contents, int line,
                     const std::string& what) {
  const std::string path = WriteTemp(name, contents);
  const absl::Status s = ReadLambadaTexts(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(path, ":", line, ": ", what))) << name;
}

TEST(ReadLambadaTextsTest, EveryBadLineIsNamed) {
  const std::string good = "{\"text\": \"one two\"}\n";
  ExpectLineError("not_json", good + "{\"text\": \"x\"\n", 2, "not valid JSON");
  ExpectLineError("not_object", good + good + "[\"text\"]\n", 3, "not a JSON object");
  ExpectLineError("no_key", "{\"txt\": \"a b\"}\n", 1, "no key 'text'");
  ExpectLineError("not_string", good + "{\"text\": 17}\n", 2,
                  "the value of 'text' is not a string");
  ExpectLineError("empty_text", "{\"text\": \"\"}\n", 1, "the text is empty");
  ExpectLineError("blank_text", good + "{\"text\": \" \\n \"}\n", 2, "the text is empty");
  ExpectLineError("empty_line", good + "\n" + good, 2, "empty line");
  ExpectLineError("trailing_blank_line", good + "\n", 2, "empty line");
}

TEST(ReadLambadaTextsTest, MissingOrEmptyFile) {
  const std::string missing = ::testing::TempDir() + "lambada_missing.jsonl";
  absl::Status s = ReadLambadaTexts(missing).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(missing));
  for (const char* contents : {"", "\n"}) {
    const std::string path = WriteTemp("empty.jsonl", contents);
    s = ReadLambadaTexts(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(path + ": no examples"));
  }
}

// ---- targets, with GPT-2 ids from the npm tiktoken encoder ------------------------------------

class LoadLambadaTest : public data::testing::TokenizerTest {};

TEST_F(LoadLambadaTest, StrictContextsAndTargetsOfTheFixture) {
  absl::StatusOr<std::vector<LambadaExample>> ex =
      LoadLambada(Fixture(), Gpt2(), LambadaMode::kStrict);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ(ex->size(), 4u);
  // "...we ran down to the" | " beach"
  EXPECT_THAT((*ex)[0].context, ElementsAre(464, 6388, 4030, 514, 2641, 329, 1115, 1528, 11, 523,
                                            319, 262, 5544, 3329, 356, 4966, 866, 284, 262));
  EXPECT_THAT((*ex)[0].target, ElementsAre(10481));
  // A word of three BPE tokens: " Kittiwake" = " Kitt" "iw" "ake".
  EXPECT_THAT((*ex)[1].context, ElementsAre(44, 8704, 13055, 262, 1310, 8848, 6016, 7872, 290, 3706,
                                            340, 706, 607, 18410, 11));
  EXPECT_THAT((*ex)[1].target, ElementsAre(43670, 14246, 539));
  // "roses" occurs twice; rfind takes the last, so the first (42152) stays in the context.
  EXPECT_THAT((*ex)[2].context, ElementsAre(6109, 3329, 673, 48024, 262, 42152, 11, 290, 790, 6180,
                                            673, 1100, 1871, 262));
  EXPECT_THAT((*ex)[2].target, ElementsAre(42152));
  // The word is "\"go\"" with its quotes; the two spaces before it are stripped from the context.
  EXPECT_THAT((*ex)[3].context, ElementsAre(464, 8966, 28077, 5403, 290, 262, 1398, 13488, 13, 198,
                                            6423, 262, 4701, 13541, 290, 531));
  EXPECT_THAT((*ex)[3].target, ElementsAre(366, 2188, 1));
}

TEST_F(LoadLambadaTest, LastTokenContextsAndTargetsOfTheFixture) {
  absl::StatusOr<std::vector<LambadaExample>> ex =
      LoadLambada(Fixture(), Gpt2(), LambadaMode::kLastToken);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ(ex->size(), 4u);
  // Only "ake" is the target; " Kitt" "iw" join the context.
  EXPECT_THAT((*ex)[1].context, ElementsAre(44, 8704, 13055, 262, 1310, 8848, 6016, 7872, 290, 3706,
                                            340, 706, 607, 18410, 11, 43670, 14246));
  EXPECT_THAT((*ex)[1].target, ElementsAre(539));
  // Tokenizing the whole text keeps the extra space (220) and splits off the closing quote.
  EXPECT_THAT((*ex)[3].context, ElementsAre(464, 8966, 28077, 5403, 290, 262, 1398, 13488, 13, 198,
                                            6423, 262, 4701, 13541, 290, 531, 220, 366, 2188));
  EXPECT_THAT((*ex)[3].target, ElementsAre(1));
}

class MakeLambadaExampleTest : public data::testing::TokenizerTest {};

TEST_F(MakeLambadaExampleTest, StrictSplitFollowsPythonStrAndRfind) {
  struct Case {
    std::string text, context, word;
  };
  const std::vector<Case> cases = {
      {"a dog ran home \n", "a dog ran", "home"},  // trailing whitespace
      {"the the", "the", "the"},                   // rfind: the last occurrence
      {"un deux\u00a0trois", "un deux", "trois"},  // U+00A0 separates words
      {"  go,\n\tnow!", "go,", "now!"},            // punctuation stays with the word
      {"x theme them", "x theme", "them"},         // w is a prefix of an earlier word
  };
  for (const Case& c : cases) {
    absl::StatusOr<LambadaExample> e = MakeLambadaExample(Gpt2(), c.text, LambadaMode::kStrict);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_THAT(e->context, ElementsAreArray(Gpt2().Encode(c.context))) << c.text;
    EXPECT_THAT(e->target, ElementsAreArray(Gpt2().Encode(" " + c.word))) << c.text;
  }
}

TEST_F(MakeLambadaExampleTest, NoContextIsInvalidArgument) {
  for (const char* text : {"hello", "  hello \n", "", " \n "}) {
    EXPECT_EQ(MakeLambadaExample(Gpt2(), text, LambadaMode::kStrict).status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
  // "hello" is one GPT-2 token (31373).
  const absl::Status s = MakeLambadaExample(Gpt2(), "hello", LambadaMode::kLastToken).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tokenizes to 1 ids"));
  EXPECT_EQ(MakeLambadaExample(Gpt2(), "", LambadaMode::kLastToken).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(LoadLambadaTest, ExampleErrorsNameTheLine) {
  const std::string path =
      WriteTemp("single_word.jsonl", "{\"text\": \"a b\"}\n{\"text\": \"b\"}\n");
  const absl::Status s = LoadLambada(path, Gpt2(), LambadaMode::kStrict).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":2: LAMBADA: the text is the single word 'b'"));
}

// ---- layout ------------------------------------------------------------------------------------

TEST(LayoutLambadaTest, PadsAndScoresTheTargetPositions) {
  const LambadaExample e{{11, 12, 13}, {21, 22}};
  absl::StatusOr<LambadaSequence> seq = LayoutLambada(e, 6, /*pad_id=*/9);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_THAT(seq->inputs, ElementsAre(11, 12, 13, 21, 22, 9));
  EXPECT_THAT(seq->targets, ElementsAre(12, 13, 21, 22, 9, 9));
  EXPECT_THAT(seq->scored, ElementsAre(0, 0, 1, 1, 0, 0));
  // Exactly fitting: C + K = L + 1, no padding.
  seq = LayoutLambada(e, 4, 9);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_THAT(seq->inputs, ElementsAre(11, 12, 13, 21));
  EXPECT_THAT(seq->targets, ElementsAre(12, 13, 21, 22));
  EXPECT_THAT(seq->scored, ElementsAre(0, 0, 1, 1));
  // One context token, one target: L = 1.
  seq = LayoutLambada(LambadaExample{{5}, {6}}, 1, 9);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_THAT(seq->inputs, ElementsAre(5));
  EXPECT_THAT(seq->targets, ElementsAre(6));
  EXPECT_THAT(seq->scored, ElementsAre(1));
}

TEST(LayoutLambadaTest, TooLongOrEmptyIsInvalidArgument) {
  const LambadaExample e{{11, 12, 13}, {21, 22}};
  absl::Status s = LayoutLambada(e, 3, 9).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("context (3 ids) + target (2 ids)"));
  EXPECT_EQ(LayoutLambada(e, 0, 9).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutLambada(LambadaExample{{}, {1}}, 4, 9).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutLambada(LambadaExample{{1}, {}}, 4, 9).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eval
}  // namespace mt
