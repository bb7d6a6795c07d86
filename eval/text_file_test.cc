#include "eval/text_file.h"

#include <sys/stat.h>

#include <string>

#include "eval/testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace eval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ReadTextFileTest, ReadsEveryByte) {
  // Larger than one read buffer, with NUL and non-ASCII bytes.
  std::string bytes(200000, 'x');
  bytes[5] = '\0';
  bytes[100000] = '\xff';
  bytes += "\r\nend";
  const std::string path = WriteTestFile("text_file_read/a.txt", bytes);
  absl::StatusOr<std::string> got = ReadTextFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
  EXPECT_EQ(ReadTextFile(WriteTestFile("text_file_read/empty.txt", "")).value(), "");
}

TEST(ReadTextFileTest, MissingFileAndDirectoryAreErrorsNamingThePath) {
  const std::string dir = MakeTestDir("text_file_read_errors");
  absl::Status s = ReadTextFile(dir + "/none.jsonl").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(dir + "/none.jsonl"));
  s = ReadTextFile(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(dir));
}

TEST(ListFilesTest, SortedRegularFilesWithTheSuffix) {
  const std::string dir = MakeTestDir("text_file_list");
  for (const char* name : {"b.txt", "a.txt", "10.txt", "9.txt", "notes.md", "txt"}) {
    WriteTestFile(std::string("text_file_list/") + name, "{}");
  }
  MakeTestDir("text_file_list/sub.txt");  // a directory, not a file
  absl::StatusOr<std::vector<std::string>> names = ListFiles(dir, ".txt");
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("10.txt", "9.txt", "a.txt", "b.txt"));
  EXPECT_THAT(ListFiles(dir, ".md").value(), ElementsAre("notes.md"));
}

TEST(ListFilesTest, MissingDirectoryOrAFileAreErrorsNamingThePath) {
  const std::string dir = MakeTestDir("text_file_list_errors");
  absl::Status s = ListFiles(dir + "/none", ".txt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(dir + "/none"));
  const std::string file = WriteTestFile("text_file_list_errors/file", "x");
  s = ListFiles(file, ".txt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(file + " is not a directory"));
}

}  // namespace
}  // namespace eval
}  // namespace mt
