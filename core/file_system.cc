#include "core/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mt {

absl::Status ErrnoStatus(int error_number, absl::string_view what, absl::string_view path) {
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      absl::StrCat(what, " ", path, ": ", std::strerror(error_number)));
}

absl::Status WriteFile(FileSystem& fs, const std::string& path, absl::string_view contents,
                       Sync sync) {
  absl::StatusOr<std::unique_ptr<WritableFile>> file = fs.NewWritableFile(path);
  if (!file.ok()) return file.status();
  const absl::Status written = (*file)->Append(contents.data(), contents.size());
  const absl::Status closed = (*file)->Close(sync);
  return written.ok() ? closed : written;
}

absl::StatusOr<std::unique_ptr<DirectReadFile>> FileSystem::NewDirectReadFile(
    const std::string& path) {
  return absl::UnimplementedError(absl::StrCat(path, ": no direct reads through this FileSystem"));
}

absl::StatusOr<std::unique_ptr<DirectWritableFile>> FileSystem::NewDirectWritableFile(
    const std::string& path) {
  return absl::UnimplementedError(absl::StrCat(path, ": no direct writes through this FileSystem"));
}

namespace {

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(const void* data, size_t n) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      // Linux writes at most ~2 GiB per call; larger requests come back short and loop.
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "cannot write", path_);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }

  absl::Status Close(Sync sync) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    const int fd = std::exchange(fd_, -1);
    if (sync == Sync::kFsync && ::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot fsync", path_);
    }
    if (::close(fd) != 0) return ErrnoStatus(errno, "cannot close", path_);
    return absl::OkStatus();
  }

  const std::string& path() const override { return path_; }

 private:
  int fd_;
  std::string path_;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(int fd, uint64_t size, std::string path)
      : fd_(fd), size_(size), path_(std::move(path)) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  absl::Status Read(uint64_t offset, size_t n, void* dst) const override {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "cannot read", path_);
      }
      if (r == 0) {
        return absl::DataLossError(
            absl::StrCat(path_, ": file ends at byte ", offset, " (truncated?)"));
      }
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return absl::OkStatus();
  }

  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  int fd_;
  uint64_t size_;
  std::string path_;
};

class PosixDirectReadFile : public DirectReadFile {
 public:
  PosixDirectReadFile(int fd, size_t alignment, uint64_t size, std::string path)
      : fd_(fd), alignment_(alignment), size_(size), path_(std::move(path)) {}
  ~PosixDirectReadFile() override { ::close(fd_); }

  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, void* dst) const override {
    char* p = static_cast<char*>(dst);
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "cannot read (O_DIRECT)", path_);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
      // A short read inside the file leaves the rest misaligned only if it was: go on from an
      // aligned point, or stop at the end of the file.
      if (done % alignment_ != 0) break;
    }
    return done;
  }

  size_t alignment() const override { return alignment_; }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  int fd_;
  size_t alignment_;
  uint64_t size_;
  std::string path_;
};

class PosixDirectWritableFile : public DirectWritableFile {
 public:
  PosixDirectWritableFile(int fd, size_t alignment, std::string path)
      : fd_(fd), alignment_(alignment), path_(std::move(path)) {}
  ~PosixDirectWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Write(uint64_t offset, size_t n, const void* src) override {
    const char* p = static_cast<const char*>(src);
    size_t done = 0;
    while (done < n) {
      const ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "cannot write (O_DIRECT)", path_);
      }
      done += static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }

  absl::Status Close(uint64_t size, Sync sync) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    const int fd = std::exchange(fd_, -1);
    int err = 0;
    const char* what = "";
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      err = errno;
      what = "cannot truncate";
    } else if (sync == Sync::kFsync && ::fsync(fd) != 0) {
      err = errno;
      what = "cannot fsync";
    }
    if (err != 0) {
      ::close(fd);
      return ErrnoStatus(err, what, path_);
    }
    if (::close(fd) != 0) return ErrnoStatus(errno, "cannot close", path_);
    return absl::OkStatus();
  }

  size_t alignment() const override { return alignment_; }
  const std::string& path() const override { return path_; }

 private:
  int fd_;
  size_t alignment_;
  std::string path_;
};

// The alignment direct I/O on `fd` needs: what statx reports (Linux 6.1 and later), else the
// page size, which every block device's logical block divides. 0 if the file cannot do it.
size_t DirectIoAlignment(int fd) {
#ifdef STATX_DIOALIGN
  struct statx stx;
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0) {
    if (stx.stx_dio_offset_align == 0 || stx.stx_dio_mem_align == 0) return 0;
    return std::max<size_t>(stx.stx_dio_offset_align, stx.stx_dio_mem_align);
  }
#endif
  return 4096;
}

// The size of the regular file open at `fd`; otherwise closes fd and returns the error.
absl::StatusOr<uint64_t> RegularFileSize(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  return static_cast<uint64_t>(st.st_size);
}

// DirectIoAlignment(fd) where it is a power of two; otherwise closes fd and returns
// InvalidArgument (no direct I/O on this file system: the callers fall back).
absl::StatusOr<size_t> DirectAlignmentOrClose(int fd, const std::string& path) {
  const size_t alignment = DirectIoAlignment(fd);
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": no direct I/O on this file system"));
  }
  return alignment;
}

class PosixFileSystem : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, "cannot create", path);
    return std::make_unique<PosixWritableFile>(fd, path);
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
    ASSIGN_OR_RETURN(const uint64_t size, RegularFileSize(fd, path));
    return std::make_unique<PosixRandomAccessFile>(fd, size, path);
  }

  absl::StatusOr<std::unique_ptr<DirectReadFile>> NewDirectReadFile(
      const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "cannot open (O_DIRECT)", path);
    ASSIGN_OR_RETURN(const uint64_t size, RegularFileSize(fd, path));
    ASSIGN_OR_RETURN(const size_t alignment, DirectAlignmentOrClose(fd, path));
    return std::make_unique<PosixDirectReadFile>(fd, alignment, size, path);
  }

  absl::StatusOr<std::unique_ptr<DirectWritableFile>> NewDirectWritableFile(
      const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, "cannot create (O_DIRECT)", path);
    ASSIGN_OR_RETURN(const size_t alignment, DirectAlignmentOrClose(fd, path));
    return std::make_unique<PosixDirectWritableFile>(fd, alignment, path);
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
    std::string out;
    char buf[1 << 16];
    for (;;) {
      const ssize_t r = ::read(fd, buf, sizeof buf);
      if (r < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd);
        return ErrnoStatus(err, "cannot read", path);
      }
      if (r == 0) break;
      out.append(buf, static_cast<size_t>(r));
    }
    ::close(fd);
    return out;
  }

  absl::StatusOr<int64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
    }
    return static_cast<int64_t>(st.st_size);
  }

  bool PathExists(const std::string& path) override {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0 || (errno != ENOENT && errno != ENOTDIR);
  }

  bool IsDirectory(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  absl::Status CheckWritableDirectory(const std::string& path) override {
    if (::access(path.c_str(), W_OK | X_OK) != 0) {
      return ErrnoStatus(errno, "cannot write in directory", path);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDirectory(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "cannot open directory", path);
    // Some file systems refuse fsync on directories (EINVAL); there is nothing more to do there.
    if (::fsync(fd) != 0 && errno != EINVAL) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot fsync directory", path);
    }
    ::close(fd);
    return absl::OkStatus();
  }

  absl::Status CreateDirectories(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return ErrnoStatus(ec.value(), "cannot create directory", path);
    if (!IsDirectory(path)) {
      return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a directory"));
    }
    return absl::OkStatus();
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus(errno, "cannot rename " + from + " to", to);
    }
    return absl::OkStatus();
  }

  absl::Status Exchange(const std::string& a, const std::string& b) override {
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
      const int err = errno;
      if (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP) {
        return absl::UnimplementedError(
            absl::StrCat("cannot exchange ", a, " and ", b, ": ", std::strerror(err)));
      }
      return ErrnoStatus(err, "cannot exchange " + a + " and", b);
    }
    return absl::OkStatus();
  }

  absl::Status RemoveAll(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return ErrnoStatus(ec.value(), "cannot remove", path);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return ErrnoStatus(errno, "cannot list directory", path);
    std::vector<std::string> names;
    for (;;) {
      errno = 0;
      const dirent* entry = ::readdir(dir);
      if (entry == nullptr) {
        const int err = errno;
        ::closedir(dir);
        if (err != 0) return ErrnoStatus(err, "cannot list directory", path);
        break;
      }
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace

FileSystem& DefaultFileSystem() {
  // Stateless: every call is a system call on its arguments.
  static PosixFileSystem* fs = new PosixFileSystem();
  return *fs;
}

}  // namespace mt
