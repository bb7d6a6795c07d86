#include "data/indexed/file_util.h"

#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "data/indexed/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

using testing::ListDir;
using testing::ReadFileBytes;
using testing::WriteFileBytes;

std::string TestDir(const std::string& name) { return testing::FreshTestDir("file_util_" + name); }

TEST(MappedFileTest, MapsTheWholeFile) {
  const std::string path = TestDir("map") + "/f";
  std::string bytes;
  for (int i = 0; i < 10007; ++i) bytes.push_back(static_cast<char>(i * 31 + 7));
  WriteFileBytes(path, bytes);
  absl::StatusOr<MappedFile> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->size(), bytes.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->data()), f->size()), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->data()) % 4096, 0u);
  // Moving keeps the mapping alive.
  MappedFile g = std::move(*f);
  EXPECT_EQ(g.size(), bytes.size());
  EXPECT_EQ(g.data()[5], static_cast<uint8_t>(bytes[5]));
}

TEST(MappedFileTest, EmptyFileMapsNothing) {
  const std::string path = TestDir("empty") + "/f";
  WriteFileBytes(path, "");
  absl::StatusOr<MappedFile> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 0u);
  EXPECT_EQ(f->data(), nullptr);
}

TEST(MappedFileTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = TestDir("missing") + "/nope";
  absl::StatusOr<MappedFile> f = MappedFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status();
}

TEST(MappedFileTest, DirectoryIsRejected) {
  absl::StatusOr<MappedFile> f = MappedFile::Open(TestDir("dir"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AtomicOutputFileTest, AppearsOnlyOnCommit) {
  const std::string dir = TestDir("commit");
  const std::string path = dir + "/out";
  WriteFileBytes(path, "old contents");
  // Larger than the 1 MiB write buffer, in odd-sized pieces.
  std::string expected;
  {
    absl::StatusOr<std::unique_ptr<AtomicOutputFile>> out = AtomicOutputFile::Create(path);
    ASSERT_TRUE(out.ok()) << out.status();
    for (int piece = 0; piece < 300; ++piece) {
      std::string s(4099 + piece, static_cast<char>('a' + piece % 26));
      expected += s;
      ASSERT_TRUE((*out)->Append(s.data(), s.size()).ok());
    }
    EXPECT_EQ((*out)->size(), static_cast<int64_t>(expected.size()));
    EXPECT_EQ(ReadFileBytes(path), "old contents");  // Untouched until Commit.
    ASSERT_TRUE((*out)->Commit().ok());
    EXPECT_EQ((*out)->Commit().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*out)->Append("x", 1).code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(ReadFileBytes(path), expected);
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"out"});  // No temporaries left.
}

TEST(AtomicOutputFileTest, AbandonedFileLeavesNothing) {
  const std::string dir = TestDir("abandon");
  const std::string path = dir + "/out";
  WriteFileBytes(path, "keep me");
  {
    absl::StatusOr<std::unique_ptr<AtomicOutputFile>> out = AtomicOutputFile::Create(path);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE((*out)->Append("partial", 7).ok());
  }
  EXPECT_EQ(ReadFileBytes(path), "keep me");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"out"});
}

TEST(AtomicOutputFileTest, MissingDirectoryIsNotFound) {
  absl::StatusOr<std::unique_ptr<AtomicOutputFile>> out =
      AtomicOutputFile::Create(TestDir("nodir") + "/no/such/dir/out");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(out.status().message().find("no/such/dir/out"), std::string::npos);
}

TEST(FileSizeTest, SizeAndMissing) {
  const std::string path = TestDir("size") + "/f";
  WriteFileBytes(path, "12345");
  EXPECT_EQ(*FileSize(path), 5);
  EXPECT_EQ(FileSize(path + "x").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace data
}  // namespace mt
