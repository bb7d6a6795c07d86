// File helpers for the data layer: a read-only memory map of a whole file, and an output file that
// appears under its final name only when it is complete (written to a temporary name, then
// renamed).
//
// Both return absl::Status for what the file system can get wrong (missing file, permissions, disk
// full) with a message naming the path. Neither is thread-safe; a MappedFile may be read from any
// number of threads once opened.
#ifndef MT_DATA_INDEXED_FILE_UTIL_H_
#define MT_DATA_INDEXED_FILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace data {

// The whole of one file, mapped read-only (PROT_READ, MAP_SHARED). Move-only; unmaps on
// destruction. An empty file is valid and maps nothing (data() is null, size() is 0). The base
// address is page-aligned.
class MappedFile {
 public:
  // NotFound (no such file), PermissionDenied, or another errno-derived code, naming the path.
  static absl::StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Release();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Writes a file under a temporary name in the same directory ("<path>.tmp-<pid>-<n>") through a
// buffer; Commit() flushes, syncs and renames it onto `path`, replacing any old file atomically.
// Destroying an uncommitted file removes the temporary, so readers never see a partial file.
class AtomicOutputFile {
 public:
  // An errno-derived status naming the path if the temporary cannot be created.
  static absl::StatusOr<std::unique_ptr<AtomicOutputFile>> Create(std::string path);
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  // Appends n bytes. Errors (e.g. ResourceExhausted for a full disk) are sticky: once a write
  // fails, every later call returns the same status.
  absl::Status Append(const void* data, size_t n);
  // Bytes appended so far.
  int64_t size() const { return size_; }
  // FailedPrecondition if already committed; errno-derived statuses from write/fsync/rename.
  absl::Status Commit();
  const std::string& path() const { return path_; }

 private:
  AtomicOutputFile(std::string path, std::string temp_path, int fd);
  absl::Status Flush();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  int64_t size_ = 0;
  absl::Status status_;
  std::vector<char> buffer_;
  size_t buffered_ = 0;
};

// The size in bytes of a file; NotFound etc. naming the path.
absl::StatusOr<int64_t> FileSize(const std::string& path);

// An errno-derived status "<what> <path>: <strerror>".
absl::Status ErrnoStatus(int error_number, absl::string_view what, absl::string_view path);

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_INDEXED_FILE_UTIL_H_
