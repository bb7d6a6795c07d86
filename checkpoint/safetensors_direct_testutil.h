// Test helpers of the safetensors direct-I/O tests (safetensors_direct_test.cc,
// safetensors_in_place_test.cc): direct reads and writes simulated over the machine's file system
// with the kernel's alignment checks, and a file of tensors of odd sizes.
#ifndef MT_CHECKPOINT_SAFETENSORS_DIRECT_TESTUTIL_H_
#define MT_CHECKPOINT_SAFETENSORS_DIRECT_TESTUTIL_H_

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/sha256.h"
#include "core/crc32c.h"
#include "core/faulty_file_system.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace mt {
namespace checkpoint {

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

  // The source and length of every direct write accepted so far.
  struct Writes {
    std::mutex mu;
    std::vector<std::pair<const char*, size_t>> sources;
  };
  Writes& writes() { return *writes_; }

 private:
  size_t alignment_;
  int allowed_;
  absl::Status write_failure_ = absl::InvalidArgumentError("direct writes refused");
  std::shared_ptr<Writes> writes_ = std::make_shared<Writes>();
};

// A DirectWritableFile that checks alignment as the kernel does and keeps the bytes in memory
// until Close(), which writes them to the file (cut to the size given).
class SimulatedDirectWritableFile : public DirectWritableFile {
 public:
  SimulatedDirectWritableFile(std::string path, size_t alignment, int allowed, absl::Status fail,
                              std::shared_ptr<SimulatedDirectFileSystem::Writes> writes)
      : path_(std::move(path)),
        alignment_(alignment),
        allowed_(allowed),
        fail_(std::move(fail)),
        writes_(std::move(writes)) {}
  absl::Status Write(uint64_t offset, size_t n, const void* src) override {
    if (offset % alignment_ != 0 || n % alignment_ != 0 ||
        reinterpret_cast<uintptr_t>(src) % alignment_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat("misaligned direct write at ", offset));
    }
    if (allowed_.fetch_sub(1) <= 0) return fail_;
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes_.size() < offset + n) bytes_.resize(offset + n, '\0');
    std::memcpy(bytes_.data() + offset, src, n);
    std::lock_guard<std::mutex> record(writes_->mu);
    writes_->sources.emplace_back(static_cast<const char*>(src), n);
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
  std::shared_ptr<SimulatedDirectFileSystem::Writes> writes_;
  std::mutex mu_;
  std::string bytes_;
};

inline absl::StatusOr<std::unique_ptr<DirectWritableFile>>
SimulatedDirectFileSystem::NewDirectWritableFile(const std::string& path) {
  if (alignment_ == 0) return FileSystem::NewDirectWritableFile(path);
  return std::make_unique<SimulatedDirectWritableFile>(path, alignment_, allowed_, write_failure_,
                                                       writes_);
}

// Tensors of odd sizes, so that their offsets in the file fall on every kind of boundary; more
// than kDirectReadFrom bytes in all.
struct TestTensor {
  std::string name;
  Shape shape;
  DType dtype;
};
inline const std::vector<TestTensor>& Layout() {
  static const auto* layout = new std::vector<TestTensor>{
      {"head", {5}, DType::kU16},           // 10 bytes, before the first aligned block ends
      {"big", {2'500'001}, DType::kF32},    // spans three 4 MiB pieces, unaligned both ends
      {"small", {777}, DType::kBF16},       // inside one block
      {"aligned", {3, 2048}, DType::kU16},  // 12 KiB
      {"tail", {1'000'003}, DType::kI32}};  // the last bytes of the file
  return *layout;
}

// The bytes of each tensor, random.
inline std::vector<std::string> Contents(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (const TestTensor& t : Layout()) {
    std::string bytes(NumElements(t.shape) * DTypeSize(t.dtype), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    out.push_back(std::move(bytes));
  }
  return out;
}

inline std::string WriteTestFile(const std::string& path,
                                 const std::vector<std::string>& contents) {
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
inline std::vector<NamedTensor> Named(const std::vector<std::string>& contents) {
  std::vector<NamedTensor> tensors;
  for (size_t i = 0; i < Layout().size(); ++i) {
    const TestTensor& t = Layout()[i];
    tensors.push_back(
        {t.name, TensorView(const_cast<char*>(contents[i].data()), t.shape, t.dtype)});
  }
  return tensors;
}

inline std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "safetensors_direct_test_" + name;
}

// Destinations at odd addresses with guard bytes around each.
struct Destinations {
  static constexpr size_t kGuard = 67;
  std::vector<std::string> memory;
  std::vector<SafetensorsReader::ReadRequest> requests;
};
inline Destinations MakeDestinations(const std::vector<size_t>& which) {
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
inline void ExpectRead(const Destinations& d, const std::vector<size_t>& which,
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

inline uint64_t Bytes(const std::vector<size_t>& which) {
  uint64_t total = 0;
  for (size_t i : which) total += NumElements(Layout()[i].shape) * DTypeSize(Layout()[i].dtype);
  return total;
}

// The file systems and digests a corruption test reads through: the default file system and
// `simulated`, each checking SHA-256s (false) and then CRC32Cs (true), as OpenChecked's crc32c.
inline std::vector<std::pair<FileSystem*, bool>> EveryFileSystemAndDigest(FileSystem* simulated) {
  return {{&DefaultFileSystem(), false},
          {simulated, false},
          {&DefaultFileSystem(), true},
          {simulated, true}};
}

// Opens `path` through fs with every tensor's SHA-256 (or CRC32C) expected.
inline absl::StatusOr<SafetensorsReader> OpenChecked(const std::string& path, FileSystem& fs,
                                                     const std::vector<std::string>& contents,
                                                     bool crc32c = false) {
  ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(path, fs));
  for (size_t i = 0; i < Layout().size(); ++i) {
    const std::string& name = Layout()[i].name;
    RETURN_IF_ERROR(crc32c
                        ? reader.ExpectCrc32c(name, Crc32c(contents[i].data(), contents[i].size()))
                        : reader.ExpectSha256(name, Sha256Hex(contents[i])));
  }
  return reader;
}

inline const std::vector<size_t> kAll = {0, 1, 2, 3, 4};

// Flips one byte of the file at `at` (bytes from the start of tensor `tensor`'s data).
inline void FlipByte(const std::string& path, const SafetensorsReader& reader,
                     const std::string& tensor, uint64_t at) {
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

inline std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_SAFETENSORS_DIRECT_TESTUTIL_H_
