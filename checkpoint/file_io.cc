#include "checkpoint/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mt {
namespace checkpoint {
namespace internal {

absl::Status ErrnoStatus(int error_number, absl::string_view what, absl::string_view path) {
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      absl::StrCat(what, " ", path, ": ", std::strerror(error_number)));
}

namespace {

// The test-only fault of MT_FAULT_INJECT (file_io.h), parsed once.
struct Fault {
  enum Kind { kNone, kKill, kErrno, kMalformed } kind = kNone;
  int64_t at_byte = 0;
  int error_number = 0;  // For kErrno.
  std::string spec;      // The variable's value, for messages.
};

const Fault& InjectedFault() {
  static const Fault fault = [] {
    Fault f;
    const char* env = std::getenv("MT_FAULT_INJECT");
    if (env == nullptr || *env == '\0') return f;
    f.spec = env;
    absl::string_view v = f.spec;
    struct Form {
      const char* prefix;
      Fault::Kind kind;
      int error_number;
    };
    for (const Form& form : {Form{"kill_at_write_byte:", Fault::kKill, 0},
                             Form{"enospc_at_byte:", Fault::kErrno, ENOSPC},
                             Form{"eio_at_byte:", Fault::kErrno, EIO}}) {
      if (absl::ConsumePrefix(&v, form.prefix) && absl::SimpleAtoi(v, &f.at_byte) &&
          f.at_byte >= 0) {
        f.kind = form.kind;
        f.error_number = form.error_number;
        return f;
      }
      v = f.spec;
    }
    f.kind = Fault::kMalformed;
    return f;
  }();
  return fault;
}

// Bytes written through OutputFile by this process (counted only while a fault is armed).
std::atomic<int64_t> bytes_written{0};

// How many of the next n bytes may be written before the injected fault; n when none is armed.
size_t BytesBeforeFault(size_t n) {
  const Fault& f = InjectedFault();
  if (f.kind == Fault::kNone) return n;
  if (f.kind == Fault::kMalformed) return 0;
  const int64_t left = std::max<int64_t>(f.at_byte - bytes_written.load(), 0);
  return static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(n)));
}

// The injected fault, once the bytes before it are written: never returns for a kill.
absl::Status InjectFault(const std::string& path) {
  const Fault& f = InjectedFault();
  if (f.kind == Fault::kKill) {
    ::kill(::getpid(), SIGKILL);
    ::pause();  // SIGKILL cannot be caught; delivery is immediate for the calling thread.
  }
  if (f.kind == Fault::kErrno) return ErrnoStatus(f.error_number, "cannot write", path);
  return absl::InvalidArgumentError(absl::StrCat(
      "MT_FAULT_INJECT=", f.spec,
      ": expected kill_at_write_byte:N, enospc_at_byte:N or eio_at_byte:N (test-only)"));
}

}  // namespace

absl::StatusOr<OutputFile> OutputFile::Create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", path);
  OutputFile file;
  file.fd_ = fd;
  file.path_ = path;
  return file;
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

absl::Status OutputFile::Write(const void* data, size_t n) {
  const size_t allowed = BytesBeforeFault(n);
  absl::Status written = WriteAll(data, allowed);
  if (!written.ok()) return written;
  if (allowed < n) return InjectFault(path_);
  return absl::OkStatus();
}

absl::Status OutputFile::WriteAll(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  if (InjectedFault().kind != Fault::kNone) bytes_written += static_cast<int64_t>(n);
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

absl::Status OutputFile::Close(Sync sync) {
  const int fd = std::exchange(fd_, -1);
  if (sync == Sync::kFsync && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot fsync", path_);
  }
  if (::close(fd) != 0) return ErrnoStatus(errno, "cannot close", path_);
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, absl::string_view contents, Sync sync) {
  auto file = OutputFile::Create(path);
  if (!file.ok()) return file.status();
  absl::Status status = file->Write(contents.data(), contents.size());
  absl::Status closed = file->Close(sync);
  return status.ok() ? closed : status;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
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

absl::StatusOr<int64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  return static_cast<int64_t>(st.st_size);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 || errno != ENOENT;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status SyncDirectory(const std::string& path) {
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

absl::Status CreateDirectories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return ErrnoStatus(ec.value(), "cannot create directory", path);
  if (!IsDirectory(path)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

absl::Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus(errno, "cannot rename " + from + " to", to);
  }
  return absl::OkStatus();
}

absl::Status Exchange(const std::string& a, const std::string& b) {
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

absl::Status RemoveAll(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return ErrnoStatus(ec.value(), "cannot remove", path);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) {
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

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int extra;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

}  // namespace internal
}  // namespace checkpoint
}  // namespace mt
