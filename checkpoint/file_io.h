// Helpers for the checkpoint code: POSIX file I/O whole-file writes with fsync, directory syncs,
// atomic renames and recursive removal, each returning an errno-derived absl::Status that names the
// path; and a UTF-8 check. Internal to checkpoint/ (the checkpoint and safetensors code); not
// thread-safe with respect to other writers of the same paths.
//
// Fault injection (TEST-ONLY): every byte written through OutputFile (and so WriteFile and
// WriteSafetensors: a checkpoint's tensors, metadata and pointer file) counts towards a
// process-wide total. When the environment variable MT_FAULT_INJECT is set, once that total
// reaches N the write that would pass it writes only up to byte N, and then:
//   MT_FAULT_INJECT=kill_at_write_byte:N   the process kills itself with SIGKILL (a crash);
//   MT_FAULT_INJECT=enospc_at_byte:N       this and every later write fails with ENOSPC (a full
//                                          disk: ResourceExhausted "cannot write PATH: No space
//                                          left on device");
//   MT_FAULT_INJECT=eio_at_byte:N          likewise with EIO (an I/O error: "Input/output error").
// A malformed value makes every write fail with InvalidArgument naming the variable. The variable
// is read once, at the first write; it is the only environment this layer reads, and only tests
// set it (jobs/pretrain/testing/checkpoint_fault_test.sh).
#ifndef MT_CHECKPOINT_FILE_IO_H_
#define MT_CHECKPOINT_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace checkpoint {

// Whether a finished file is flushed to stable storage (fsync) before it is closed.
enum class Sync { kNone, kFsync };

namespace internal {

// "<what> <path>: <strerror>" with the code absl derives from the errno value.
absl::Status ErrnoStatus(int error_number, absl::string_view what, absl::string_view path);

// A file opened for writing (created or truncated, mode 0644). Move-only; closes on destruction.
class OutputFile {
 public:
  static absl::StatusOr<OutputFile> Create(const std::string& path);
  OutputFile() = default;
  ~OutputFile();
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Writes all n bytes (retrying short writes and EINTR); ResourceExhausted for a full disk.
  absl::Status Write(const void* data, size_t n);
  // Optionally fsyncs, then closes; a failed close or fsync is reported (data may be lost).
  absl::Status Close(Sync sync);
  const std::string& path() const { return path_; }

 private:
  absl::Status WriteAll(const void* data, size_t n);  // Write() without fault injection.

  int fd_ = -1;
  std::string path_;
};

// Writes `contents` to `path` (replacing it), then closes it with `sync`.
absl::Status WriteFile(const std::string& path, absl::string_view contents, Sync sync);
// The whole file; NotFound if it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Size of a regular file; NotFound if it does not exist.
absl::StatusOr<int64_t> FileSize(const std::string& path);
// True if `path` exists (any type). Errors other than "does not exist" count as existing.
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);

// fsync on a directory, making renames and creations inside it durable.
absl::Status SyncDirectory(const std::string& path);
// mkdir -p (mode 0755); OK if it already exists as a directory.
absl::Status CreateDirectories(const std::string& path);
// rename(2): atomic replacement of a file, or of an empty directory.
absl::Status Rename(const std::string& from, const std::string& to);
// Atomically swaps two existing paths (renameat2 RENAME_EXCHANGE). Unimplemented where the
// kernel or file system does not support it.
absl::Status Exchange(const std::string& a, const std::string& b);
// rm -rf; OK if the path does not exist.
absl::Status RemoveAll(const std::string& path);
// Names of the entries of a directory (no "." or ".."), sorted.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);

// Well-formed UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. JSON writers need
// it.
bool IsValidUtf8(absl::string_view s);

}  // namespace internal
}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_FILE_IO_H_
