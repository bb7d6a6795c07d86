// File I/O behind an interface, as LevelDB's Env does it: code that must survive a crash or a full
// disk (the checkpoint layer) reads and writes through a FileSystem it is handed, never through
// POSIX calls of its own. Production passes DefaultFileSystem(), the machine's file system; tests
// pass their own (core/faulty_file_system.h: a crash, a full disk or an I/O error at a chosen
// byte), so no production code reads an environment variable, counts bytes or kills itself.
//
//   FileSystem& fs = DefaultFileSystem();
//   ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, fs.NewWritableFile(dir + "/x.tmp"));
//   RETURN_IF_ERROR(f->Append(bytes.data(), bytes.size()));
//   RETURN_IF_ERROR(f->Close(Sync::kFsync));
//   RETURN_IF_ERROR(fs.Rename(dir + "/x.tmp", dir + "/x"));
//   RETURN_IF_ERROR(fs.SyncDirectory(dir));
//
// Errors are absl::Status values whose message names the path and whose code follows the errno
// value (absl::ErrnoToStatusCode): NotFound for a missing file, PermissionDenied, ResourceExhausted
// for a full disk, ... Implementations are thread-safe. A RandomAccessFile's Read may be called
// from several threads at once (it keeps no position); any other file object is used by one thread
// at a time.
#ifndef MT_CORE_FILE_SYSTEM_H_
#define MT_CORE_FILE_SYSTEM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {

// Whether a finished file is flushed to stable storage (fsync) before it is closed.
enum class Sync { kNone, kFsync };

// A file open for writing. Destroying one that is still open closes it without syncing.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all n bytes (short writes and EINTR retried). ResourceExhausted for a full disk.
  virtual absl::Status Append(const void* data, size_t n) = 0;
  // Optionally fsyncs, then closes; a failed fsync or close is an error (data may be lost).
  // FailedPrecondition if already closed.
  virtual absl::Status Close(Sync sync) = 0;
  virtual const std::string& path() const = 0;
};

// A file open for reading at any offset.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Exactly n bytes from `offset` into dst. DataLoss naming the path and the offset if the file
  // ends first.
  virtual absl::Status Read(uint64_t offset, size_t n, void* dst) const = 0;
  // The size when opened.
  virtual uint64_t size() const = 0;
  virtual const std::string& path() const = 0;
};

// A file open for reading around the page cache (O_DIRECT): the device transfers straight into
// the caller's memory, so a large sequential read costs the CPU no copy into the cache and leaves
// no pages behind. File offsets, lengths and memory addresses must be multiples of alignment().
// Read may be called from several threads at once.
class DirectReadFile {
 public:
  virtual ~DirectReadFile() = default;
  // Up to n bytes from `offset` into dst: the count read, less than n only where the file ends
  // (EINTR and short reads retried). InvalidArgument (EINVAL) for a request the kernel refuses,
  // a misaligned one among them: callers fall back to buffered reads.
  virtual absl::StatusOr<size_t> Read(uint64_t offset, size_t n, void* dst) const = 0;
  // The alignment of offsets, lengths and addresses, a power of two.
  virtual size_t alignment() const = 0;
  // The size when opened.
  virtual uint64_t size() const = 0;
  virtual const std::string& path() const = 0;
};

// A file open for writing around the page cache (O_DIRECT): the device takes the bytes straight
// from the caller's memory, so the CPU copies nothing into a cache and no writeback follows.
// Offsets, lengths and addresses must be multiples of alignment(); Write may be called from
// several threads at once (for different ranges). Destroying one that is still open closes it
// without syncing.
class DirectWritableFile {
 public:
  virtual ~DirectWritableFile() = default;
  // All n bytes at `offset` (short writes retried). InvalidArgument (EINVAL) for a request the
  // kernel refuses, a misaligned one among them; ResourceExhausted for a full disk.
  virtual absl::Status Write(uint64_t offset, size_t n, const void* src) = 0;
  // Cuts the file to `size` bytes (the last aligned write may have run past the end), optionally
  // fsyncs, then closes. FailedPrecondition if already closed.
  virtual absl::Status Close(uint64_t size, Sync sync) = 0;
  virtual size_t alignment() const = 0;
  virtual const std::string& path() const = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Created, or truncated, with mode 0644.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // A regular file (FailedPrecondition for anything else).
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // A regular file open for direct reads, where this file system offers them: Unimplemented
  // where it does not (the default), InvalidArgument where the kernel refuses O_DIRECT for the
  // file (EINVAL); NotFound etc. as NewRandomAccessFile. Callers that get no such file read
  // through NewRandomAccessFile: the bytes are the same either way.
  virtual absl::StatusOr<std::unique_ptr<DirectReadFile>> NewDirectReadFile(
      const std::string& path);
  // Created, or truncated, with mode 0644, for direct writes; Unimplemented where this file
  // system offers none (the default), InvalidArgument where the kernel refuses O_DIRECT. Callers
  // that get no such file write through NewWritableFile: the file's bytes are the same.
  virtual absl::StatusOr<std::unique_ptr<DirectWritableFile>> NewDirectWritableFile(
      const std::string& path);
  // The whole file.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // The size of a regular file (FailedPrecondition for anything else).
  virtual absl::StatusOr<int64_t> FileSize(const std::string& path) = 0;
  // Whether `path` exists (any type; a link is not followed). A missing entry or a file where a
  // directory was expected on the way means no; any other error counts as existing.
  virtual bool PathExists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  // Whether this process may create entries in the existing directory `path`; else the errno
  // status of the check (PermissionDenied, ...).
  virtual absl::Status CheckWritableDirectory(const std::string& path) = 0;
  // fsync of a directory: makes the creations and renames inside it durable.
  virtual absl::Status SyncDirectory(const std::string& path) = 0;
  // mkdir -p (mode 0755); OK if it exists as a directory, FailedPrecondition if as anything else.
  virtual absl::Status CreateDirectories(const std::string& path) = 0;
  // rename(2): the atomic replacement of a file, or of an empty directory.
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // Swaps two existing paths atomically (renameat2 RENAME_EXCHANGE). Unimplemented where the
  // kernel or the file system cannot.
  virtual absl::Status Exchange(const std::string& a, const std::string& b) = 0;
  // rm -rf; OK if the path does not exist.
  virtual absl::Status RemoveAll(const std::string& path) = 0;
  // The names of a directory's entries (no "." or ".."), sorted bytewise.
  virtual absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) = 0;
};

// The machine's file system, through POSIX calls. It holds no state, so one instance serves the
// whole process.
FileSystem& DefaultFileSystem();

// Writes `contents` to `path` through fs (replacing the file), then closes it with `sync`.
absl::Status WriteFile(FileSystem& fs, const std::string& path, absl::string_view contents,
                       Sync sync);

// "<what> <path>: <strerror>" with the code absl derives from the errno value.
absl::Status ErrnoStatus(int error_number, absl::string_view what, absl::string_view path);

}  // namespace mt

#endif  // MT_CORE_FILE_SYSTEM_H_
