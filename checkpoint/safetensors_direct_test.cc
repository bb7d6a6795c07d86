// SafetensorsReader::ReadMany's direct reads and WriteSafetensorsWithDigests' direct writes (around
// the page cache, direct_read.h, direct_write.h): the bytes, digests and errors are those of the
// page cache's path whatever the tensors' offsets, the destinations' addresses and the file
// system, and every request is aligned.
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_direct_testutil.h"
#include "checkpoint/sha256.h"
#include "core/crc32c.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace checkpoint {
namespace {

TEST(SafetensorsDirectReadTest, ReadsAroundThePageCacheWhereTheKernelAllows) {
  const std::vector<std::string> contents = Contents(1);
  const std::string path = WriteTestFile(TempPath("real"), contents);
  ASSERT_GT(Bytes(kAll), SafetensorsReader::kDirectReadFrom);
  ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, DefaultFileSystem(), contents));
  Destinations d = MakeDestinations(kAll);
  SafetensorsReader::ReadStats stats;
  ASSERT_OK(reader.ReadMany(d.requests, &stats));
  ExpectRead(d, kAll, contents);
  EXPECT_EQ(stats.direct_bytes + stats.buffered_bytes, Bytes(kAll));
  // Whether this file system takes O_DIRECT is the kernel's business; where it does, every byte
  // came that way.
  if (DefaultFileSystem().NewDirectReadFile(path).ok()) {
    EXPECT_EQ(stats.direct_bytes, Bytes(kAll));
  } else {
    EXPECT_EQ(stats.direct_bytes, 0u);
  }
}

TEST(SafetensorsDirectReadTest, EveryRequestIsAlignedWhateverTheOffsets) {
  const std::vector<std::string> contents = Contents(2);
  const std::string path = WriteTestFile(TempPath("aligned"), contents);
  // A refused (misaligned) request would send the rest through the page cache: all bytes direct
  // means none was.
  for (size_t alignment : {512, 4096, 65536}) {
    SimulatedDirectFileSystem fs(alignment, INT_MAX);
    ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, fs, contents));
    for (const std::vector<size_t>& which :
         std::vector<std::vector<size_t>>{kAll, {4, 1}, {1, 3}, {4, 0, 1, 2}}) {
      Destinations d = MakeDestinations(which);
      SafetensorsReader::ReadStats stats;
      ASSERT_OK(reader.ReadMany(d.requests, &stats));
      ExpectRead(d, which, contents);
      EXPECT_EQ(stats.direct_bytes, Bytes(which)) << "alignment " << alignment;
      EXPECT_EQ(stats.buffered_bytes, 0u);
    }
  }
}

TEST(SafetensorsDirectReadTest, FallsBackToBufferedReadsWhereRefused) {
  const std::vector<std::string> contents = Contents(3);
  const std::string path = WriteTestFile(TempPath("refused"), contents);
  // Refused from the start, after two pieces (the rest of "big" and "tail" buffered), and no
  // direct reads offered at all.
  for (const auto& [alignment, allowed] :
       std::vector<std::pair<size_t, int>>{{4096, 0}, {4096, 2}, {0, 0}}) {
    SimulatedDirectFileSystem fs(alignment, allowed);
    ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, fs, contents));
    Destinations d = MakeDestinations(kAll);
    SafetensorsReader::ReadStats stats;
    ASSERT_OK(reader.ReadMany(d.requests, &stats));
    ExpectRead(d, kAll, contents);
    EXPECT_EQ(stats.direct_bytes + stats.buffered_bytes, Bytes(kAll));
    if (allowed == 2) {
      EXPECT_GT(stats.direct_bytes, 4u << 20);  // At least the first piece, whole.
      EXPECT_GT(stats.buffered_bytes, 4u << 20);
    } else {
      EXPECT_EQ(stats.direct_bytes, 0u);
    }
  }
}

TEST(SafetensorsDirectReadTest, ReadsAFileOnTmpfs) {
  // tmpfs takes O_DIRECT on recent kernels and refuses it on older ones: the bytes are the same.
  if (access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no writable /dev/shm";
  const std::vector<std::string> contents = Contents(4);
  const std::string path =
      WriteTestFile(absl::StrCat("/dev/shm/safetensors_direct_test_", getpid()), contents);
  {
    ASSERT_OK_AND_ASSIGN(SafetensorsReader reader,
                         OpenChecked(path, DefaultFileSystem(), contents));
    Destinations d = MakeDestinations(kAll);
    SafetensorsReader::ReadStats stats;
    ASSERT_OK(reader.ReadMany(d.requests, &stats));
    ExpectRead(d, kAll, contents);
    EXPECT_EQ(stats.direct_bytes + stats.buffered_bytes, Bytes(kAll));
  }
  unlink(path.c_str());
}

TEST(SafetensorsDirectReadTest, ACorruptByteIsCaught) {
  const std::vector<std::string> contents = Contents(5);
  // One flipped byte deep inside "big" (in its third piece), one in "head" (the first block).
  for (const auto& [tensor, at] :
       std::vector<std::pair<std::string, uint64_t>>{{"big", 9'000'001}, {"head", 3}}) {
    const std::string path = WriteTestFile(TempPath("corrupt_" + tensor), contents);
    SimulatedDirectFileSystem simulated(4096, INT_MAX);
    for (const auto& [fs, crc32c] : EveryFileSystemAndDigest(&simulated)) {
      ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, *fs, contents, crc32c));
      FlipByte(path, reader, tensor, at);
      Destinations d = MakeDestinations(kAll);
      SafetensorsReader::ReadStats stats;
      const absl::Status s = reader.ReadMany(d.requests, &stats);
      EXPECT_TRUE(absl::IsDataLoss(s)) << s;
      EXPECT_NE(s.message().find(absl::StrCat("tensor '", tensor, "' fails its ",
                                              crc32c ? "CRC32C" : "SHA-256", " check")),
                std::string::npos)
          << s;
      FlipByte(path, reader, tensor, at);  // Restored for the next file system.
    }
  }
}

TEST(SafetensorsDirectReadTest, AFileTruncatedSinceOpenIsDataLoss) {
  const std::vector<std::string> contents = Contents(6);
  SimulatedDirectFileSystem simulated(4096, INT_MAX);
  for (FileSystem* fs : {&DefaultFileSystem(), static_cast<FileSystem*>(&simulated)}) {
    const std::string path = WriteTestFile(TempPath("truncated"), contents);
    ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, *fs, contents));
    ASSERT_EQ(truncate(path.c_str(), 9'000'000), 0);
    Destinations d = MakeDestinations(kAll);
    const absl::Status s = reader.ReadMany(d.requests);
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_NE(s.message().find("file ends at byte"), std::string::npos) << s;
  }
}

TEST(SafetensorsDirectWriteTest, WritesTheSameBytesAndDigestsAroundThePageCache) {
  const std::vector<std::string> contents = Contents(7);
  const SafetensorsMetadata metadata = {{"format", "pt"}};
  ASSERT_OK_AND_ASSIGN(const std::string expected, SerializeSafetensors(Named(contents), metadata));
  ASSERT_GT(expected.size(), kDirectWriteFrom);
  std::vector<std::string> want_sha256;
  std::vector<uint32_t> want_crc32c;
  for (const std::string& c : contents) {
    want_sha256.push_back(Sha256Hex(c));
    want_crc32c.push_back(Crc32c(c.data(), c.size()));
  }
  // The machine's file system (O_DIRECT where the kernel takes it); simulated direct writes that
  // refuse anything misaligned (so all of them aligned if the file is right); refused from the
  // start and after three pieces (the file written again through the page cache); none offered.
  SimulatedDirectFileSystem aligned512(512, INT_MAX), aligned64k(65536, INT_MAX);
  SimulatedDirectFileSystem refused(4096, 0), refused_later(4096, 3), none(0, 0);
  for (FileSystem* fs : std::vector<FileSystem*>{&DefaultFileSystem(), &aligned512, &aligned64k,
                                                 &refused, &refused_later, &none}) {
    const std::string path = TempPath("written");
    ASSERT_OK_AND_ASSIGN(
        const std::vector<TensorDigests> digests,
        WriteSafetensorsWithDigests(path, Named(contents), metadata, Sync::kFsync, *fs));
    ASSERT_EQ(digests.size(), contents.size());
    for (size_t i = 0; i < contents.size(); ++i) {
      EXPECT_EQ(digests[i].sha256, want_sha256[i]) << "tensor " << i;
      EXPECT_EQ(digests[i].crc32c, want_crc32c[i]) << "tensor " << i;
    }
    EXPECT_TRUE(FileBytes(path) == expected) << "file of " << FileBytes(path).size() << " bytes";
  }
}

TEST(SafetensorsDirectWriteTest, AFailedDirectWriteIsReported) {
  const std::vector<std::string> contents = Contents(8);
  SimulatedDirectFileSystem fs(4096, 2);
  fs.set_write_failure(absl::ResourceExhaustedError("cannot write (O_DIRECT) x: No space left"));
  const absl::StatusOr<std::vector<TensorDigests>> digests =
      WriteSafetensorsWithDigests(TempPath("full"), Named(contents), {}, Sync::kFsync, fs);
  EXPECT_TRUE(absl::IsResourceExhausted(digests.status())) << digests.status();
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt
