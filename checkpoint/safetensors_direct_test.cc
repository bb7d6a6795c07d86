// SafetensorsReader::ReadMany's direct reads and WriteSafetensorsWithDigests' direct writes (around
// the page cache, direct_read.h, direct_write.h): the bytes, digests and errors are those of the
// page cache's path whatever the tensors' offsets, the destinations' addresses and the file
// system, and every request is aligned.
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
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

// ---- Reads straight into the destinations (in place), where their addresses align as the file
// offsets do.

// The file's header length (the data region starts at 8 + it).
uint64_t HeaderLength(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  return n;
}

// The file as older writers left it: the header padded to a multiple of 8 only.
std::string WriteOldLayoutFile(const std::string& path, const std::vector<std::string>& contents) {
  WriteTestFile(path, contents);
  const std::string bytes = FileBytes(path);
  const uint64_t n = HeaderLength(path);
  std::string json = bytes.substr(8, n);
  json.erase(json.find_last_not_of(' ') + 1);
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t m = json.size();
  std::string out(reinterpret_cast<const char*>(&m), 8);
  out += json;
  out += bytes.substr(8 + n);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << out;
  return path;
}

// Destinations in page-aligned memory, each placed so that its address agrees with its file offset
// modulo kAlign (plus `shift` bytes), with guard bytes before and after.
struct AlignedDestinations {
  static constexpr size_t kAlign = 65536;  // The largest alignment tested.
  static constexpr size_t kGuard = 4096;
  std::vector<std::unique_ptr<char, decltype(&std::free)>> memory;
  std::vector<size_t> start, bytes;  // Where each tensor's bytes begin in its memory; how many.
  std::vector<SafetensorsReader::ReadRequest> requests;
};
AlignedDestinations MakeAlignedDestinations(const std::string& path,
                                            const SafetensorsReader& reader, size_t shift) {
  AlignedDestinations d;
  const uint64_t data_start = 8 + HeaderLength(path);
  for (const TestTensor& t : Layout()) {
    const size_t bytes = NumElements(t.shape) * DTypeSize(t.dtype);
    const size_t at = AlignedDestinations::kAlign +
                      (data_start + reader.Find(t.name)->begin) % AlignedDestinations::kAlign +
                      shift;
    const size_t total = at + bytes + AlignedDestinations::kGuard;
    const size_t a = AlignedDestinations::kAlign;
    d.memory.emplace_back(static_cast<char*>(std::aligned_alloc(a, (total + a - 1) / a * a)),
                          &std::free);
    std::memset(d.memory.back().get(), 0xa5, total);
    d.start.push_back(at);
    d.bytes.push_back(bytes);
    d.requests.push_back({t.name, TensorView(d.memory.back().get() + at, t.shape, t.dtype)});
  }
  return d;
}

// Each destination holds its tensor and every guard byte is untouched.
void ExpectAlignedRead(const AlignedDestinations& d, const std::vector<std::string>& contents) {
  for (size_t k = 0; k < contents.size(); ++k) {
    const char* m = d.memory[k].get();
    EXPECT_EQ(std::memcmp(m + d.start[k], contents[k].data(), d.bytes[k]), 0) << Layout()[k].name;
    size_t bad_guards = 0;
    for (size_t i = 0; i < d.start[k]; ++i) bad_guards += m[i] != '\xa5';
    for (size_t i = 0; i < AlignedDestinations::kGuard; ++i) {
      bad_guards += m[d.start[k] + d.bytes[k] + i] != '\xa5';
    }
    EXPECT_EQ(bad_guards, 0u) << Layout()[k].name;
  }
}

// The bytes of the tensors' aligned interiors of 1 MiB or more (the reader's threshold), worked
// out from the layout: what is read in place when destinations and offsets agree.
uint64_t ExpectedInPlace(const std::string& path, const SafetensorsReader& reader, uint64_t a) {
  const uint64_t data_start = 8 + HeaderLength(path);
  uint64_t total = 0;
  for (const TestTensor& t : Layout()) {
    const uint64_t begin = (data_start + reader.Find(t.name)->begin + a - 1) / a * a;
    const uint64_t end = (data_start + reader.Find(t.name)->end) / a * a;
    if (end > begin && end - begin >= (uint64_t{1} << 20)) total += end - begin;
  }
  return total;
}

TEST(SafetensorsDirectReadTest, ReadsStraightIntoDestinationsThatAlignLikeTheFile) {
  const std::vector<std::string> contents = Contents(9);
  const std::string new_path = WriteTestFile(TempPath("in_place"), contents);
  ASSERT_EQ((8 + HeaderLength(new_path)) % 4096, 0u) << "the writer pads the header to a page";
  const std::string old_path = WriteOldLayoutFile(TempPath("in_place_old"), contents);
  ASSERT_NE((8 + HeaderLength(old_path)) % 512, 0u) << "the test wants unaligned offsets";
  for (const std::string& path : {new_path, old_path}) {
    // The machine's file system (O_DIRECT where it takes it), and simulated direct reads that
    // refuse any misaligned request (so all bytes direct means every request was aligned).
    SimulatedDirectFileSystem fs512(512, INT_MAX), fs4096(4096, INT_MAX), fs64k(65536, INT_MAX);
    for (FileSystem* fs : std::vector<FileSystem*>{&DefaultFileSystem(), &fs512, &fs4096, &fs64k}) {
      absl::StatusOr<std::unique_ptr<DirectReadFile>> direct = fs->NewDirectReadFile(path);
      ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, *fs, contents));
      // Destinations that agree with the file, and the same 4 bytes further (nothing in place).
      for (size_t shift : {0, 4}) {
        SCOPED_TRACE(absl::StrCat(path, " alignment ", direct.ok() ? (*direct)->alignment() : 0,
                                  " shift ", shift));
        AlignedDestinations d = MakeAlignedDestinations(path, reader, shift);
        SafetensorsReader::ReadStats stats;
        ASSERT_OK(reader.ReadMany(d.requests, &stats));
        ExpectAlignedRead(d, contents);
        EXPECT_EQ(stats.direct_bytes + stats.buffered_bytes, Bytes(kAll));
        if (!direct.ok()) continue;  // No O_DIRECT here: all buffered, checked above.
        EXPECT_EQ(stats.direct_bytes, Bytes(kAll));
        const uint64_t want =
            shift == 0 ? ExpectedInPlace(path, reader, (*direct)->alignment()) : 0;
        EXPECT_EQ(stats.in_place_bytes, want);
        if (shift == 0) {
          EXPECT_GT(want, 10u << 20);  // "big" and "tail", less their heads and tails.
        }
      }
    }
  }
}

TEST(SafetensorsDirectReadTest, InPlaceReadsFallBackAndCatchCorruption) {
  const std::vector<std::string> contents = Contents(10);
  const std::string path = WriteTestFile(TempPath("in_place_faults"), contents);
  // Refused after three requests: the rest buffered, the same bytes, guards intact.
  {
    SimulatedDirectFileSystem fs(4096, 3);
    ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, fs, contents));
    AlignedDestinations d = MakeAlignedDestinations(path, reader, 0);
    SafetensorsReader::ReadStats stats;
    ASSERT_OK(reader.ReadMany(d.requests, &stats));
    ExpectAlignedRead(d, contents);
    EXPECT_GT(stats.buffered_bytes, 4u << 20);
    EXPECT_EQ(stats.direct_bytes + stats.buffered_bytes, Bytes(kAll));
  }
  // A flipped byte inside "big"'s in-place interior, in its staged head, and in "tail"'s staged
  // last bytes (the file's last 428 bytes at alignment 512).
  for (const auto& [tensor, at] : std::vector<std::pair<std::string, uint64_t>>{
           {"big", 5'000'000}, {"big", 1}, {"tail", 4'000'000}}) {
    SimulatedDirectFileSystem simulated(512, INT_MAX);
    for (FileSystem* fs : {&DefaultFileSystem(), static_cast<FileSystem*>(&simulated)}) {
      ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, *fs, contents));
      FlipByte(path, reader, tensor, at);
      AlignedDestinations d = MakeAlignedDestinations(path, reader, 0);
      const absl::Status s = reader.ReadMany(d.requests);
      EXPECT_TRUE(absl::IsDataLoss(s)) << s;
      EXPECT_NE(s.message().find(absl::StrCat("tensor '", tensor, "' fails its SHA-256 check")),
                std::string::npos)
          << s;
      FlipByte(path, reader, tensor, at);  // Restored.
    }
  }
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
