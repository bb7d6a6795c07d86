// The RACE reader: the fixture tree eval/testdata/RACE and every error path (temporary files).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "eval/race.h"
#include "eval/testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace eval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string FixtureRoot() { return TestDataPath("RACE"); }

TEST(RaceLevelTest, Names) {
  EXPECT_EQ(RaceLevelName(RaceLevel::kMiddle), "middle");
  EXPECT_EQ(RaceLevelName(RaceLevel::kHigh), "high");
  RaceGroup g;
  g.split = "test";
  g.level = RaceLevel::kHigh;
  EXPECT_EQ(g.name(), "test/high");
}

TEST(ReadRaceTest, GroupsBySplitAndLevelInOrder) {
  absl::StatusOr<std::vector<RaceGroup>> groups = ReadRace(FixtureRoot(), {"train", "dev", "test"});
  ASSERT_TRUE(groups.ok()) << groups.status();
  std::vector<std::string> names;
  std::vector<int64_t> articles, questions;
  for (const RaceGroup& g : *groups) {
    names.push_back(g.name());
    articles.push_back(static_cast<int64_t>(g.articles.size()));
    questions.push_back(g.num_questions());
  }
  EXPECT_THAT(names, ElementsAre("train/middle", "train/high", "dev/middle", "dev/high",
                                 "test/middle", "test/high"));
  EXPECT_THAT(articles, ElementsAre(1, 2, 2, 1, 1, 1));
  EXPECT_THAT(questions, ElementsAre(2, 5, 5, 3, 2, 2));
  // Bytewise file name order: "12.txt" before "3.txt".
  const RaceGroup& dev_middle = (*groups)[2];
  EXPECT_EQ(dev_middle.articles[0].path, FixtureRoot() + "/dev/middle/12.txt");
  EXPECT_EQ(dev_middle.articles[1].path, FixtureRoot() + "/dev/middle/3.txt");
}

TEST(ReadRaceTest, OneFileInFull) {
  absl::StatusOr<RaceGroup> g = ReadRaceGroup(FixtureRoot(), "dev", RaceLevel::kMiddle);
  ASSERT_TRUE(g.ok()) << g.status();
  const RaceArticle& a = g->articles[0];
  EXPECT_EQ(a.article,
            "Ben forgot his umbrella at home. When the rain started after school, his sister "
            "shared hers, and they walked home together.");
  ASSERT_EQ(a.questions.size(), 2u);
  EXPECT_EQ(a.questions[0].question, "Who shared an umbrella with Ben?");
  EXPECT_THAT(a.questions[0].options,
              ElementsAre("His sister", "His father", "His teacher", "Nobody"));
  EXPECT_EQ(a.questions[0].label, 0);  // "A"
  EXPECT_EQ(a.questions[1].question, "Ben got home _ .");
  EXPECT_THAT(a.questions[1].options,
              ElementsAre("by bus", "alone", "with his sister", "late at night"));
  EXPECT_EQ(a.questions[1].label, 2);  // "C"
  // Answers B, D, C.
  const RaceArticle& b = g->articles[1];
  ASSERT_EQ(b.questions.size(), 3u);
  EXPECT_EQ(b.questions[0].label, 1);
  EXPECT_EQ(b.questions[1].label, 3);
  EXPECT_EQ(b.questions[2].label, 2);
}

// ---- file errors -------------------------------------------------------------------------------

// A file whose JSON object has these members (raw JSON text, joined by commas).
std::string WriteRaceFile(const std::string& name, const std::string& members) {
  return WriteTestFile("race_files/" + name + ".txt", "{" + members + "}");
}

const char kArticle[] = "\"article\": \"A short text.\"";
const char kQuestions[] = "\"questions\": [\"Q1?\", \"Q2 _ .\"]";
const char kOptions[] = "\"options\": [[\"a\", \"b\", \"c\", \"d\"], [\"e\", \"f\", \"g\", \"h\"]]";
const char kAnswers[] = "\"answers\": [\"D\", \"A\"]";

std::string Members(const std::string& article, const std::string& questions,
                    const std::string& options, const std::string& answers) {
  return absl::StrCat(article, ", ", questions, ", ", options, ", ", answers, ", \"id\": \"x\"");
}

void ExpectFileError(const std::string& name, const std::string& members, const std::string& what) {
  const std::string path = WriteRaceFile(name, members);
  const absl::Status s = ReadRaceFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
  EXPECT_THAT(s.message(), HasSubstr(path + ": " + what)) << name;
}

TEST(ReadRaceFileTest, TheBaseCaseReads) {
  absl::StatusOr<RaceArticle> a =
      ReadRaceFile(WriteRaceFile("good", Members(kArticle, kQuestions, kOptions, kAnswers)));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->questions.size(), 2u);
  EXPECT_EQ(a->questions[0].label, 3);
  EXPECT_THAT(a->questions[1].options, ElementsAre("e", "f", "g", "h"));
  // No questions at all is a valid (empty) article.
  a = ReadRaceFile(WriteRaceFile("no_questions", Members(kArticle, "\"questions\": []",
                                                         "\"options\": []", "\"answers\": []")));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->questions.empty());
}

TEST(ReadRaceFileTest, MalformedFiles) {
  const std::string missing = ::testing::TempDir() + "race_files/none.txt";
  EXPECT_EQ(ReadRaceFile(missing).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ReadRaceFile(missing).status().message(), HasSubstr(missing));
  ExpectFileError("truncated", "\"article\": ", "not valid JSON");
  const std::string path = WriteTestFile("race_files/array.txt", "[1, 2]");
  EXPECT_THAT(ReadRaceFile(path).status().message(), HasSubstr(path + ": not a JSON object"));
}

TEST(ReadRaceFileTest, MissingKeys) {
  const std::string all[] = {kArticle, kQuestions, kOptions, kAnswers};
  const char* const keys[] = {"article", "questions", "options", "answers"};
  for (int drop = 0; drop < 4; ++drop) {
    std::string members = "\"id\": \"x\"";
    for (int k = 0; k < 4; ++k) {
      if (k != drop) members += ", " + all[k];
    }
    ExpectFileError(absl::StrCat("no_", keys[drop]), members,
                    absl::StrCat("no key '", keys[drop], "'"));
  }
}

TEST(ReadRaceFileTest, WrongTypes) {
  ExpectFileError("article_number", Members("\"article\": 3", kQuestions, kOptions, kAnswers),
                  "'article' is not a string");
  ExpectFileError("questions_string",
                  Members(kArticle, "\"questions\": \"Q1?\"", kOptions, kAnswers),
                  "'questions' is not an array");
  ExpectFileError("question_number",
                  Members(kArticle, "\"questions\": [\"Q1?\", 2]", kOptions, kAnswers),
                  "'questions'[1] is not a string");
  ExpectFileError("options_object", Members(kArticle, kQuestions, "\"options\": {}", kAnswers),
                  "'options' is not an array");
  ExpectFileError("option_list_string",
                  Members(kArticle, kQuestions,
                          "\"options\": [\"abcd\", [\"e\", \"f\", \"g\", \"h\"]]", kAnswers),
                  "'options'[0] is not an array");
  ExpectFileError(
      "option_null",
      Members(kArticle, kQuestions,
              "\"options\": [[\"a\", \"b\", null, \"d\"], [\"e\", \"f\", \"g\", \"h\"]]", kAnswers),
      "'options'[0][2] is not a string");
  ExpectFileError("answers_string", Members(kArticle, kQuestions, kOptions, "\"answers\": \"DA\""),
                  "'answers' is not an array");
  ExpectFileError("answer_number", Members(kArticle, kQuestions, kOptions, "\"answers\": [3, 0]"),
                  "'answers'[0] is not a string");
}

TEST(ReadRaceFileTest, WrongCountsAndAnswers) {
  ExpectFileError(
      "three_options",
      Members(kArticle, kQuestions,
              "\"options\": [[\"a\", \"b\", \"c\", \"d\"], [\"e\", \"f\", \"g\"]]", kAnswers),
      "'options'[1] has 3 options; expected 4");
  ExpectFileError(
      "five_options",
      Members(kArticle, kQuestions,
              "\"options\": [[\"a\", \"b\", \"c\", \"d\", \"x\"], [\"e\", \"f\", \"g\", \"h\"]]",
              kAnswers),
      "'options'[0] has 5 options; expected 4");
  ExpectFileError("one_answer", Members(kArticle, kQuestions, kOptions, "\"answers\": [\"A\"]"),
                  "2 'questions', 2 'options' and 1 'answers'");
  ExpectFileError(
      "one_option_list",
      Members(kArticle, kQuestions, "\"options\": [[\"a\", \"b\", \"c\", \"d\"]]", kAnswers),
      "2 'questions', 1 'options' and 2 'answers'");
  for (const char* bad : {"E", "a", "AB", ""}) {
    ExpectFileError(absl::StrCat("answer_", bad),
                    Members(kArticle, kQuestions, kOptions,
                            absl::StrCat("\"answers\": [\"A\", \"", bad, "\"]")),
                    absl::StrCat("'answers'[1] is '", bad, "'; expected one of A, B, C, D"));
  }
}

// ---- directory errors --------------------------------------------------------------------------

TEST(ReadRaceGroupTest, UnknownSplit) {
  const absl::Status s = ReadRaceGroup(FixtureRoot(), "validation", RaceLevel::kMiddle).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown RACE split 'validation'"));
}

TEST(ReadRaceGroupTest, MissingSplitOrLevelDirectory) {
  const std::string root = MakeTestDir("race_tree/RACE");
  WriteTestFile("race_tree/RACE/dev/middle/1.txt",
                "{" + Members(kArticle, kQuestions, kOptions, kAnswers) + "}");
  // dev/middle reads; dev/high is missing; test is missing.
  EXPECT_TRUE(ReadRaceGroup(root, "dev", RaceLevel::kMiddle).ok());
  absl::Status s = ReadRaceGroup(root, "test", RaceLevel::kMiddle).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("RACE split 'test'"));
  EXPECT_THAT(s.message(), HasSubstr(root + "/test"));
  s = ReadRace(root, {"dev"}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("RACE dev/high: "));
  EXPECT_THAT(s.message(), HasSubstr(root + "/dev/high"));
  // A level directory without *.txt files.
  WriteTestFile("race_tree/RACE/dev/high/readme.md", "not a question file");
  s = ReadRaceGroup(root, "dev", RaceLevel::kHigh).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no *.txt files in " + root + "/dev/high"));
}

TEST(ReadRaceGroupTest, ABadFileIsNamed) {
  const std::string root = MakeTestDir("race_bad_tree/RACE");
  WriteTestFile("race_bad_tree/RACE/train/high/1.txt",
                "{" + Members(kArticle, kQuestions, kOptions, kAnswers) + "}");
  const std::string bad = WriteTestFile(
      "race_bad_tree/RACE/train/high/2.txt",
      "{" + Members(kArticle, kQuestions, kOptions, "\"answers\": [\"A\", \"F\"]") + "}");
  const absl::Status s = ReadRaceGroup(root, "train", RaceLevel::kHigh).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(bad + ": 'answers'[1] is 'F'"));
}

}  // namespace
}  // namespace eval
}  // namespace mt
