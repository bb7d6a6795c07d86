// The POSIX file system against the files it leaves on disk, and the faulting one: the bytes before
// its fault reach the file, the fault is the one named, a crash kills the process.
#include "core/file_system.h"

#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/faulty_file_system.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

class FileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/fs_test_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_OK(fs_.RemoveAll(dir_));
    ASSERT_OK(fs_.CreateDirectories(dir_ + "/sub/deeper"));
  }
  void TearDown() override { fs_.RemoveAll(dir_).IgnoreError(); }

  FileSystem& fs_ = DefaultFileSystem();
  std::string dir_;
};

TEST_F(FileSystemTest, WritesReadsAndLists) {
  ASSERT_OK(WriteFile(fs_, dir_ + "/b", "hello", Sync::kFsync));
  ASSERT_OK(WriteFile(fs_, dir_ + "/a", std::string(70000, 'x'), Sync::kNone));
  ASSERT_OK_AND_ASSIGN(const std::string b, fs_.ReadFile(dir_ + "/b"));
  EXPECT_EQ(b, "hello");
  ASSERT_OK_AND_ASSIGN(const int64_t size, fs_.FileSize(dir_ + "/a"));
  EXPECT_EQ(size, 70000);
  ASSERT_OK_AND_ASSIGN(const std::vector<std::string> names, fs_.ListDirectory(dir_));
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "sub"}));
  EXPECT_TRUE(fs_.IsDirectory(dir_ + "/sub/deeper"));
  EXPECT_FALSE(fs_.IsDirectory(dir_ + "/a"));
  EXPECT_TRUE(fs_.PathExists(dir_ + "/a"));
  EXPECT_FALSE(fs_.PathExists(dir_ + "/c"));
  EXPECT_FALSE(fs_.PathExists(dir_ + "/a/below_a_file"));  // ENOTDIR: no such path.
  EXPECT_TRUE(fs_.CheckWritableDirectory(dir_).ok());
  EXPECT_TRUE(fs_.SyncDirectory(dir_).ok());

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RandomAccessFile> f, fs_.NewRandomAccessFile(dir_ + "/b"));
  EXPECT_EQ(f->size(), 5u);
  char two[2];
  ASSERT_OK(f->Read(3, 2, two));
  EXPECT_EQ(std::string(two, 2), "lo");
  const absl::Status past = f->Read(4, 2, two);
  EXPECT_TRUE(absl::IsDataLoss(past)) << past;
  EXPECT_NE(past.message().find(dir_ + "/b"), std::string::npos) << past;
}

TEST_F(FileSystemTest, RenamesExchangesAndRemoves) {
  ASSERT_OK(WriteFile(fs_, dir_ + "/a", "A", Sync::kNone));
  ASSERT_OK(WriteFile(fs_, dir_ + "/b", "B", Sync::kNone));
  ASSERT_OK(fs_.Rename(dir_ + "/a", dir_ + "/c"));
  EXPECT_FALSE(fs_.PathExists(dir_ + "/a"));
  const absl::Status exchanged = fs_.Exchange(dir_ + "/b", dir_ + "/c");
  if (!absl::IsUnimplemented(exchanged)) {  // Some file systems cannot; the caller falls back.
    ASSERT_OK(exchanged);
    ASSERT_OK_AND_ASSIGN(const std::string b, fs_.ReadFile(dir_ + "/b"));
    EXPECT_EQ(b, "A");
  }
  ASSERT_OK(fs_.RemoveAll(dir_ + "/sub"));
  EXPECT_FALSE(fs_.PathExists(dir_ + "/sub"));
  EXPECT_TRUE(fs_.RemoveAll(dir_ + "/never_there").ok());
}

TEST_F(FileSystemTest, ErrorsNameThePath) {
  const std::string missing = dir_ + "/missing";
  const absl::Status read = fs_.ReadFile(missing).status();
  EXPECT_TRUE(absl::IsNotFound(read)) << read;
  EXPECT_NE(read.message().find(missing), std::string::npos) << read;
  EXPECT_TRUE(absl::IsNotFound(fs_.NewRandomAccessFile(missing).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(fs_.NewRandomAccessFile(dir_ + "/sub").status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(fs_.FileSize(dir_ + "/sub").status()));
  EXPECT_TRUE(absl::IsNotFound(fs_.ListDirectory(missing).status()));
  EXPECT_TRUE(absl::IsNotFound(fs_.NewWritableFile(missing + "/x").status()));
  ASSERT_OK(WriteFile(fs_, dir_ + "/file", "x", Sync::kNone));
  EXPECT_TRUE(absl::IsFailedPrecondition(fs_.CreateDirectories(dir_ + "/file")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> w, fs_.NewWritableFile(dir_ + "/w"));
  ASSERT_OK(w->Close(Sync::kNone));
  EXPECT_TRUE(absl::IsFailedPrecondition(w->Close(Sync::kNone)));
  EXPECT_TRUE(absl::IsFailedPrecondition(w->Append("x", 1)));
}

TEST_F(FileSystemTest, DirectWritesAndReadsAroundThePageCache) {
  const std::string path = dir_ + "/direct";
  absl::StatusOr<std::unique_ptr<DirectWritableFile>> w = fs_.NewDirectWritableFile(path);
  if (!w.ok()) GTEST_SKIP() << "no O_DIRECT on this file system: " << w.status();
  const size_t a = (*w)->alignment();
  ASSERT_GT(a, 0u);
  ASSERT_EQ(a & (a - 1), 0u);
  // Three aligned blocks of a known pattern, the last written past the file's end and cut back.
  std::unique_ptr<char, decltype(&std::free)> block(
      static_cast<char*>(std::aligned_alloc(a, 3 * a)), &std::free);
  for (size_t i = 0; i < 3 * a; ++i) block.get()[i] = static_cast<char>(i * 7 + 1);
  ASSERT_OK((*w)->Write(a, 2 * a, block.get() + a));  // Out of order, from two threads' view.
  ASSERT_OK((*w)->Write(0, a, block.get()));
  const uint64_t size = 2 * a + 5;
  ASSERT_OK((*w)->Close(size, Sync::kFsync));
  EXPECT_TRUE(absl::IsFailedPrecondition((*w)->Close(size, Sync::kNone)));
  ASSERT_OK_AND_ASSIGN(const std::string bytes, fs_.ReadFile(path));
  EXPECT_EQ(bytes, std::string(block.get(), size));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DirectReadFile> r, fs_.NewDirectReadFile(path));
  EXPECT_EQ(r->size(), size);
  std::memset(block.get(), 0, 3 * a);
  // A read past the end returns what the file holds.
  ASSERT_OK_AND_ASSIGN(const size_t got, r->Read(a, 2 * a, block.get()));
  EXPECT_EQ(got, a + 5);
  EXPECT_EQ(std::string(block.get(), got), bytes.substr(a));
  // A misaligned request is refused as the kernel refuses it: InvalidArgument.
  const absl::StatusOr<size_t> misaligned = r->Read(1, a, block.get());
  EXPECT_TRUE(absl::IsInvalidArgument(misaligned.status())) << misaligned.status();
  EXPECT_TRUE(absl::IsNotFound(fs_.NewDirectReadFile(dir_ + "/missing").status()));
  // A directory: FailedPrecondition, or InvalidArgument where O_DIRECT is refused at open.
  EXPECT_FALSE(fs_.NewDirectReadFile(dir_ + "/sub").ok());
}

TEST_F(FileSystemTest, DirectIoIsOptionalForAFileSystem) {
  ASSERT_OK(WriteFile(fs_, dir_ + "/f", "x", Sync::kNone));
  FaultyFileSystem faulty(fs_, {FileFault::kNoSpace, 100});
  EXPECT_TRUE(absl::IsUnimplemented(faulty.NewDirectReadFile(dir_ + "/f").status()));
  EXPECT_TRUE(absl::IsUnimplemented(faulty.NewDirectWritableFile(dir_ + "/g").status()));
}

TEST(ParseFileFaultTest, ReadsTheThreeForms) {
  ASSERT_OK_AND_ASSIGN(const FileFaultSpec kill, ParseFileFault("kill_at_write_byte:17"));
  EXPECT_EQ(kill.fault, FileFault::kCrash);
  EXPECT_EQ(kill.at_byte, 17);
  ASSERT_OK_AND_ASSIGN(const FileFaultSpec full, ParseFileFault("enospc_at_byte:0"));
  EXPECT_EQ(full.fault, FileFault::kNoSpace);
  EXPECT_EQ(full.at_byte, 0);
  ASSERT_OK_AND_ASSIGN(const FileFaultSpec eio, ParseFileFault("eio_at_byte:9"));
  EXPECT_EQ(eio.fault, FileFault::kIoError);
  for (const char* bad :
       {"", "eio_at_byte:", "eio_at_byte:-1", "enospc:3", "kill_at_write_byte:x"}) {
    const absl::Status s = ParseFileFault(bad).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_NE(s.message().find("enospc_at_byte:N"), std::string::npos) << s;
  }
}

TEST_F(FileSystemTest, NoSpaceAfterTheChosenByteAcrossFiles) {
  FaultyFileSystem faulty(fs_, {FileFault::kNoSpace, /*at_byte=*/7});
  ASSERT_OK(WriteFile(faulty, dir_ + "/first", "abcd", Sync::kFsync));  // Bytes 0-3.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> f, faulty.NewWritableFile(dir_ + "/second"));
  const absl::Status s = f->Append("efghij", 6);  // Bytes 4-9: only 4-6 are written.
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find(dir_ + "/second"), std::string::npos) << s;
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsResourceExhausted(f->Append("k", 1)));  // And every later write.
  ASSERT_OK(f->Close(Sync::kNone));
  ASSERT_OK_AND_ASSIGN(const std::string second, fs_.ReadFile(dir_ + "/second"));
  EXPECT_EQ(second, "efg");
  EXPECT_EQ(faulty.bytes_written(), 11);
  // Everything but writing is forwarded.
  ASSERT_OK_AND_ASSIGN(const std::string first, faulty.ReadFile(dir_ + "/first"));
  EXPECT_EQ(first, "abcd");
  ASSERT_OK(faulty.Rename(dir_ + "/first", dir_ + "/renamed"));
  EXPECT_TRUE(fs_.PathExists(dir_ + "/renamed"));
}

TEST_F(FileSystemTest, IoErrorAtByteZero) {
  FaultyFileSystem faulty(fs_, {FileFault::kIoError, /*at_byte=*/0});
  const absl::Status s = WriteFile(faulty, dir_ + "/x", "y", Sync::kNone);
  EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s;
  ASSERT_OK_AND_ASSIGN(const int64_t size, fs_.FileSize(dir_ + "/x"));
  EXPECT_EQ(size, 0);
}

TEST_F(FileSystemTest, CrashKillsTheProcessAfterTheBytesBeforeIt) {
  const std::string path = dir_ + "/crash";
  EXPECT_EXIT(
      {
        FaultyFileSystem faulty(DefaultFileSystem(), {FileFault::kCrash, /*at_byte=*/3});
        WriteFile(faulty, path, "abcdef", Sync::kNone).IgnoreError();
        std::exit(0);  // Not reached.
      },
      ::testing::KilledBySignal(SIGKILL), "");
  ASSERT_OK_AND_ASSIGN(const std::string written, fs_.ReadFile(path));
  EXPECT_EQ(written, "abc");
}

}  // namespace
}  // namespace mt
