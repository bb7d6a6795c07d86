// SafetensorsReader::ReadMany's direct reads and WriteSafetensorsWithDigests' direct writes (around
// the page cache, direct_read.h, direct_write.h): the bytes, digests and errors are those of the
// page cache's path whatever the tensors' offsets, the destinations' addresses and the file
// system, and every request is aligned.
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/sha256.h"
#include "core/faulty_file_system.h"
#include "core/status.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace checkpoint {
namespace {

// A DirectReadFile made of buffered reads that refuses, as the kernel does (InvalidArgument),
// every request whose offset, length or address is not a multiple of `alignment`, and every
// request after the first `allowed` ones.
class SimulatedDirectFile : public DirectReadFile {
 public:
  SimulatedDirectFile(std::unique_ptr<RandomAccessFile> file, size_t alignment, int allowed)
      : file_(std::move(file)), alignment_(alignment), allowed_(allowed) {}
  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, void* dst) const override {
    if (offset % alignment_ != 0 || n % alignment_ != 0 ||
        reinterpret_cast<uintptr_t>(dst) % alignment_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat("misaligned direct read at ", offset));
    }
    if (allowed_.fetch_sub(1) <= 0) return absl::InvalidArgumentError("direct reads refused");
    const size_t got = offset >= size() ? 0 : std::min<uint64_t>(n, size() - offset);
    RETURN_IF_ERROR(file_->Read(offset, got, dst));
    return got;
  }
  size_t alignment() const override { return alignment_; }
  uint64_t size() const override { return file_->size(); }
  const std::string& path() const override { return file_->path(); }

 private:
  std::unique_ptr<RandomAccessFile> file_;
  size_t alignment_;
  mutable std::atomic<int> allowed_;
};

// The machine's file system (through FaultyFileSystem's forwarding, its fault never reached) with
// simulated direct reads; alignment 0: none offered (Unimplemented, FileSystem's default).
class SimulatedDirectFileSystem : public FaultyFileSystem {
 public:
  SimulatedDirectFileSystem(size_t alignment, int allowed)
      : FaultyFileSystem(DefaultFileSystem(), {FileFault::kNoSpace, INT64_MAX}),
        alignment_(alignment),
        allowed_(allowed) {}
  absl::StatusOr<std::unique_ptr<DirectReadFile>> NewDirectReadFile(
      const std::string& path) override {
    if (alignment_ == 0) return FileSystem::NewDirectReadFile(path);
    ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                     DefaultFileSystem().NewRandomAccessFile(path));
    return std::make_unique<SimulatedDirectFile>(std::move(file), alignment_, allowed_);
  }
  absl::StatusOr<std::unique_ptr<DirectWritableFile>> NewDirectWritableFile(
      const std::string& path) override;

  // The status of the writes after the first `allowed` ones (InvalidArgument by default).
  void set_write_failure(absl::Status s) { write_failure_ = std::move(s); }

 private:
  size_t alignment_;
  int allowed_;
  absl::Status write_failure_ = absl::InvalidArgumentError("direct writes refused");
};

// A DirectWritableFile that checks alignment as the kernel does and keeps the bytes in memory
// until Close(), which writes them to the file (cut to the size given).
class SimulatedDirectWritableFile : public DirectWritableFile {
 public:
  SimulatedDirectWritableFile(std::string path, size_t alignment, int allowed, absl::Status fail)
      : path_(std::move(path)), alignment_(alignment), allowed_(allowed), fail_(std::move(fail)) {}
  absl::Status Write(uint64_t offset, size_t n, const void* src) override {
    if (offset % alignment_ != 0 || n % alignment_ != 0 ||
        reinterpret_cast<uintptr_t>(src) % alignment_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat("misaligned direct write at ", offset));
    }
    if (allowed_.fetch_sub(1) <= 0) return fail_;
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes_.size() < offset + n) bytes_.resize(offset + n, '\0');
    std::memcpy(bytes_.data() + offset, src, n);
    return absl::OkStatus();
  }
  absl::Status Close(uint64_t size, Sync sync) override {
    bytes_.resize(size, '\0');
    return WriteFile(DefaultFileSystem(), path_, bytes_, sync);
  }
  size_t alignment() const override { return alignment_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  size_t alignment_;
  std::atomic<int> allowed_;
  absl::Status fail_;
  std::mutex mu_;
  std::string bytes_;
};

absl::StatusOr<std::unique_ptr<DirectWritableFile>>
SimulatedDirectFileSystem::NewDirectWritableFile(const std::string& path) {
  if (alignment_ == 0) return FileSystem::NewDirectWritableFile(path);
  return std::make_unique<SimulatedDirectWritableFile>(path, alignment_, allowed_, write_failure_);
}

// Tensors of odd sizes, so that their offsets in the file fall on every kind of boundary; more
// than kDirectReadFrom bytes in all.
struct TestTensor {
  std::string name;
  Shape shape;
  DType dtype;
};
const std::vector<TestTensor>& Layout() {
  static const auto* layout = new std::vector<TestTensor>{
      {"head", {5}, DType::kU16},           // 10 bytes, before the first aligned block ends
      {"big", {2'500'001}, DType::kF32},    // spans three 4 MiB pieces, unaligned both ends
      {"small", {777}, DType::kBF16},       // inside one block
      {"aligned", {3, 2048}, DType::kU16},  // 12 KiB
      {"tail", {1'000'003}, DType::kI32}};  // the last bytes of the file
  return *layout;
}

// The bytes of each tensor, random.
std::vector<std::string> Contents(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (const TestTensor& t : Layout()) {
    std::string bytes(NumElements(t.shape) * DTypeSize(t.dtype), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    out.push_back(std::move(bytes));
  }
  return out;
}

std::string WriteTestFile(const std::string& path, const std::vector<std::string>& contents) {
  std::vector<NamedTensor> tensors;
  for (size_t i = 0; i < Layout().size(); ++i) {
    const TestTensor& t = Layout()[i];
    tensors.push_back(
        {t.name, TensorView(const_cast<char*>(contents[i].data()), t.shape, t.dtype)});
  }
  const absl::Status written = WriteSafetensors(path, tensors);
  EXPECT_TRUE(written.ok()) << written;
  return path;
}

// The tensors as NamedTensors over `contents`.
std::vector<NamedTensor> Named(const std::vector<std::string>& contents) {
  std::vector<NamedTensor> tensors;
  for (size_t i = 0; i < Layout().size(); ++i) {
    const TestTensor& t = Layout()[i];
    tensors.push_back(
        {t.name, TensorView(const_cast<char*>(contents[i].data()), t.shape, t.dtype)});
  }
  return tensors;
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "safetensors_direct_test_" + name;
}

// Destinations at odd addresses with guard bytes around each.
struct Destinations {
  static constexpr size_t kGuard = 67;
  std::vector<std::string> memory;
  std::vector<SafetensorsReader::ReadRequest> requests;
};
Destinations MakeDestinations(const std::vector<size_t>& which) {
  Destinations d;
  d.memory.reserve(which.size());
  for (size_t i : which) {
    const TestTensor& t = Layout()[i];
    const size_t bytes = NumElements(t.shape) * DTypeSize(t.dtype);
    d.memory.emplace_back(bytes + 2 * Destinations::kGuard, '\xa5');
    d.requests.push_back(
        {t.name, TensorView(d.memory.back().data() + Destinations::kGuard, t.shape, t.dtype)});
  }
  return d;
}

// Each destination holds its tensor, and the guards are untouched.
void ExpectRead(const Destinations& d, const std::vector<size_t>& which,
                const std::vector<std::string>& contents) {
  for (size_t k = 0; k < which.size(); ++k) {
    const std::string& m = d.memory[k];
    const std::string& want = contents[which[k]];
    EXPECT_TRUE(m.compare(Destinations::kGuard, want.size(), want) == 0) << Layout()[which[k]].name;
    const std::string guard(Destinations::kGuard, '\xa5');
    EXPECT_EQ(m.substr(0, Destinations::kGuard), guard);
    EXPECT_EQ(m.substr(Destinations::kGuard + want.size()), guard);
  }
}

uint64_t Bytes(const std::vector<size_t>& which) {
  uint64_t total = 0;
  for (size_t i : which) total += NumElements(Layout()[i].shape) * DTypeSize(Layout()[i].dtype);
  return total;
}

// Opens `path` through fs with every tensor's digest expected.
absl::StatusOr<SafetensorsReader> OpenChecked(const std::string& path, FileSystem& fs,
                                              const std::vector<std::string>& contents) {
  ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(path, fs));
  for (size_t i = 0; i < Layout().size(); ++i) {
    RETURN_IF_ERROR(reader.ExpectSha256(Layout()[i].name, Sha256Hex(contents[i])));
  }
  return reader;
}

const std::vector<size_t> kAll = {0, 1, 2, 3, 4};

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

// Flips one byte of the file at `at` (bytes from the start of tensor `tensor`'s data).
void FlipByte(const std::string& path, const SafetensorsReader& reader, const std::string& tensor,
              uint64_t at) {
  const uint64_t data_start = 8 + [&] {
    std::ifstream in(path, std::ios::binary);
    uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    return n;
  }();
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  const uint64_t pos = data_start + reader.Find(tensor)->begin + at;
  f.seekg(static_cast<std::streamoff>(pos));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(pos));
  f.write(&c, 1);
  ASSERT_TRUE(f.good());
}

TEST(SafetensorsDirectReadTest, ACorruptByteIsCaught) {
  const std::vector<std::string> contents = Contents(5);
  // One flipped byte deep inside "big" (in its third piece), one in "head" (the first block).
  for (const auto& [tensor, at] :
       std::vector<std::pair<std::string, uint64_t>>{{"big", 9'000'001}, {"head", 3}}) {
    const std::string path = WriteTestFile(TempPath("corrupt_" + tensor), contents);
    SimulatedDirectFileSystem simulated(4096, INT_MAX);
    for (FileSystem* fs : {&DefaultFileSystem(), static_cast<FileSystem*>(&simulated)}) {
      ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, *fs, contents));
      FlipByte(path, reader, tensor, at);
      Destinations d = MakeDestinations(kAll);
      SafetensorsReader::ReadStats stats;
      const absl::Status s = reader.ReadMany(d.requests, &stats);
      EXPECT_TRUE(absl::IsDataLoss(s)) << s;
      EXPECT_NE(s.message().find(absl::StrCat("tensor '", tensor, "' fails its SHA-256 check")),
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

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SafetensorsDirectWriteTest, WritesTheSameBytesAndDigestsAroundThePageCache) {
  const std::vector<std::string> contents = Contents(7);
  const SafetensorsMetadata metadata = {{"format", "pt"}};
  ASSERT_OK_AND_ASSIGN(const std::string expected, SerializeSafetensors(Named(contents), metadata));
  ASSERT_GT(expected.size(), kDirectWriteFrom);
  std::vector<std::string> want_digests;
  for (const std::string& c : contents) want_digests.push_back(Sha256Hex(c));
  // The machine's file system (O_DIRECT where the kernel takes it); simulated direct writes that
  // refuse anything misaligned (so all of them aligned if the file is right); refused from the
  // start and after three pieces (the file written again through the page cache); none offered.
  SimulatedDirectFileSystem aligned512(512, INT_MAX), aligned64k(65536, INT_MAX);
  SimulatedDirectFileSystem refused(4096, 0), refused_later(4096, 3), none(0, 0);
  for (FileSystem* fs : std::vector<FileSystem*>{&DefaultFileSystem(), &aligned512, &aligned64k,
                                                 &refused, &refused_later, &none}) {
    const std::string path = TempPath("written");
    ASSERT_OK_AND_ASSIGN(
        const std::vector<std::string> digests,
        WriteSafetensorsWithDigests(path, Named(contents), metadata, Sync::kFsync, *fs));
    EXPECT_EQ(digests, want_digests);
    EXPECT_TRUE(FileBytes(path) == expected) << "file of " << FileBytes(path).size() << " bytes";
  }
}

TEST(SafetensorsDirectWriteTest, AFailedDirectWriteIsReported) {
  const std::vector<std::string> contents = Contents(8);
  SimulatedDirectFileSystem fs(4096, 2);
  fs.set_write_failure(absl::ResourceExhaustedError("cannot write (O_DIRECT) x: No space left"));
  const absl::StatusOr<std::vector<std::string>> digests =
      WriteSafetensorsWithDigests(TempPath("full"), Named(contents), {}, Sync::kFsync, fs);
  EXPECT_TRUE(absl::IsResourceExhausted(digests.status())) << digests.status();
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt
