#include "eval/text_file.h"

#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace eval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  ASSERT_EQ(std::fclose(f), 0);
}

std::string MakeDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "text_file_" + name;
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

TEST(ReadTextFileTest, ReadsEveryByte) {
  const std::string dir = MakeDir("read");
  // Larger than one read buffer, with NUL and non-ASCII bytes.
  std::string bytes(200000, 'x');
  bytes[5] = '\0';
  bytes[100000] = '\xff';
  bytes += "\r\nend";
  WriteFile(dir + "/a.txt", bytes);
  absl::StatusOr<std::string> got = ReadTextFile(dir + "/a.txt");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
  WriteFile(dir + "/empty.txt", "");
  EXPECT_EQ(ReadTextFile(dir + "/empty.txt").value(), "");
}

TEST(ReadTextFileTest, MissingFileAndDirectoryAreErrorsNamingThePath) {
  const std::string dir = MakeDir("read_errors");
  absl::Status s = ReadTextFile(dir + "/none.jsonl").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(dir + "/none.jsonl"));
  s = ReadTextFile(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(dir));
}

TEST(ListFilesTest, SortedRegularFilesWithTheSuffix) {
  const std::string dir = MakeDir("list");
  for (const char* name : {"b.txt", "a.txt", "10.txt", "9.txt", "notes.md", "txt"}) {
    WriteFile(dir + "/" + name, "{}");
  }
  ::mkdir((dir + "/sub.txt").c_str(), 0755);  // a directory, not a file
  absl::StatusOr<std::vector<std::string>> names = ListFiles(dir, ".txt");
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("10.txt", "9.txt", "a.txt", "b.txt"));
  EXPECT_THAT(ListFiles(dir, ".md").value(), ElementsAre("notes.md"));
}

TEST(ListFilesTest, MissingDirectoryOrAFileAreErrorsNamingThePath) {
  const std::string dir = MakeDir("list_errors");
  absl::Status s = ListFiles(dir + "/none", ".txt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(dir + "/none"));
  WriteFile(dir + "/file", "x");
  s = ListFiles(dir + "/file", ".txt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(dir + "/file is not a directory"));
}

}  // namespace
}  // namespace eval
}  // namespace mt
