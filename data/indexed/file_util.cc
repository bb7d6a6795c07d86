#include "data/indexed/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt {
namespace data {

namespace {

constexpr size_t kWriteBufferBytes = size_t{1} << 20;

// Distinguishes temporaries created by several writers in one process.
std::atomic<uint64_t> temp_counter{0};

}  // namespace

absl::Status ErrnoStatus(int error_number, absl::string_view what, absl::string_view path) {
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      absl::StrCat(what, " ", path, ": ", std::strerror(error_number)));
}

absl::StatusOr<int64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
  return static_cast<int64_t>(st.st_size);
}

// ---------------------------------------------------------------------------------------------
// MappedFile

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("cannot map ", path, ": not a regular file"));
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot mmap", path);
    }
    file.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // The mapping stays valid without the descriptor.
  return file;
}

MappedFile::~MappedFile() { Release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

void MappedFile::Release() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

// ---------------------------------------------------------------------------------------------
// AtomicOutputFile

absl::StatusOr<std::unique_ptr<AtomicOutputFile>> AtomicOutputFile::Create(std::string path) {
  std::string temp = absl::StrCat(path, ".tmp-", ::getpid(), "-", temp_counter.fetch_add(1));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", temp);
  return std::unique_ptr<AtomicOutputFile>(
      new AtomicOutputFile(std::move(path), std::move(temp), fd));
}

AtomicOutputFile::AtomicOutputFile(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)),
      temp_path_(std::move(temp_path)),
      fd_(fd),
      buffer_(kWriteBufferBytes) {}

AtomicOutputFile::~AtomicOutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

absl::Status AtomicOutputFile::Append(const void* data, size_t n) {
  if (!status_.ok()) return status_;
  if (committed_) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  const char* p = static_cast<const char*>(data);
  size_ += static_cast<int64_t>(n);
  while (n > 0) {
    const size_t take = std::min(n, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ == buffer_.size()) {
      status_ = Flush();
      if (!status_.ok()) return status_;
    }
  }
  return absl::OkStatus();
}

absl::Status AtomicOutputFile::Flush() {
  size_t done = 0;
  while (done < buffered_) {
    const ssize_t w = ::write(fd_, buffer_.data() + done, buffered_ - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot write", temp_path_);
    }
    done += static_cast<size_t>(w);
  }
  buffered_ = 0;
  return absl::OkStatus();
}

absl::Status AtomicOutputFile::Commit() {
  if (committed_) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  if (!status_.ok()) return status_;
  status_ = Flush();
  if (!status_.ok()) return status_;
  if (::fdatasync(fd_) != 0) return status_ = ErrnoStatus(errno, "cannot sync", temp_path_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return status_ = ErrnoStatus(errno, "cannot close", temp_path_);
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return status_ = ErrnoStatus(errno, absl::StrCat("cannot rename ", temp_path_, " to"), path_);
  }
  committed_ = true;
  return absl::OkStatus();
}

}  // namespace data
}  // namespace mt
