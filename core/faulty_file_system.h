// A FileSystem for tests (testonly) that forwards to another and fails at a chosen byte: every
// byte appended through its WritableFiles counts towards one total, and the append that would
// pass byte N writes only up to it, then
//   kCrash   kills the process with SIGKILL (a crash: what the page cache holds survives),
//   kNoSpace this and every later write fails with ENOSPC (a full disk: ResourceExhausted
//            "cannot write PATH: No space left on device"),
//   kIoError likewise with EIO ("Input/output error").
// Everything else (reads, renames, directory operations) is forwarded unchanged.
//
//   FaultyFileSystem fs(DefaultFileSystem(), {FileFault::kNoSpace, /*at_byte=*/4096});
//   absl::Status s = checkpoint::SaveShard(dir, meta, records, fs);  // ResourceExhausted
//
// ParseFileFault reads the spelling a test binary's flag takes: "kill_at_write_byte:N",
// "enospc_at_byte:N" or "eio_at_byte:N". Thread-safe (the byte total is atomic).
#ifndef MT_CORE_FAULTY_FILE_SYSTEM_H_
#define MT_CORE_FAULTY_FILE_SYSTEM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/file_system.h"

namespace mt {

enum class FileFault { kCrash, kNoSpace, kIoError };

struct FileFaultSpec {
  FileFault fault = FileFault::kCrash;
  int64_t at_byte = 0;  // >= 0
};

// InvalidArgument naming the spelling for anything but the three forms above with N >= 0.
absl::StatusOr<FileFaultSpec> ParseFileFault(absl::string_view spec);

class FaultyFileSystem : public FileSystem {
 public:
  // `base` must outlive this object.
  FaultyFileSystem(FileSystem& base, FileFaultSpec spec) : base_(base), spec_(spec) {}

  // Bytes appended so far (those written before the fault included).
  int64_t bytes_written() const { return bytes_written_.load(); }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return base_.NewRandomAccessFile(path);
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return base_.ReadFile(path);
  }
  absl::StatusOr<int64_t> FileSize(const std::string& path) override {
    return base_.FileSize(path);
  }
  bool PathExists(const std::string& path) override { return base_.PathExists(path); }
  bool IsDirectory(const std::string& path) override { return base_.IsDirectory(path); }
  absl::Status CheckWritableDirectory(const std::string& path) override {
    return base_.CheckWritableDirectory(path);
  }
  absl::Status SyncDirectory(const std::string& path) override { return base_.SyncDirectory(path); }
  absl::Status CreateDirectories(const std::string& path) override {
    return base_.CreateDirectories(path);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return base_.Rename(from, to);
  }
  absl::Status Exchange(const std::string& a, const std::string& b) override {
    return base_.Exchange(a, b);
  }
  absl::Status RemoveAll(const std::string& path) override { return base_.RemoveAll(path); }
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    return base_.ListDirectory(path);
  }

 private:
  friend class FaultyWritableFile;
  // How many of the next n bytes may be written before the fault (counting them).
  size_t Reserve(size_t n);
  // The fault, once the bytes before it are written: never returns for kCrash.
  absl::Status Fail(const std::string& path) const;

  FileSystem& base_;
  const FileFaultSpec spec_;
  std::atomic<int64_t> bytes_written_{0};
};

}  // namespace mt

#endif  // MT_CORE_FAULTY_FILE_SYSTEM_H_
