#include "core/faulty_file_system.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status.h"

namespace mt {

absl::StatusOr<FileFaultSpec> ParseFileFault(absl::string_view spec) {
  struct Form {
    const char* prefix;
    FileFault fault;
  };
  for (const Form& form :
       {Form{"kill_at_write_byte:", FileFault::kCrash},
        Form{"enospc_at_byte:", FileFault::kNoSpace}, Form{"eio_at_byte:", FileFault::kIoError}}) {
    absl::string_view v = spec;
    FileFaultSpec f;
    if (absl::ConsumePrefix(&v, form.prefix) && absl::SimpleAtoi(v, &f.at_byte) && f.at_byte >= 0) {
      f.fault = form.fault;
      return f;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "file fault '", spec, "': expected kill_at_write_byte:N, enospc_at_byte:N or eio_at_byte:N"));
}

class FaultyWritableFile : public WritableFile {
 public:
  FaultyWritableFile(FaultyFileSystem& fs, std::unique_ptr<WritableFile> file)
      : fs_(fs), file_(std::move(file)) {}

  absl::Status Append(const void* data, size_t n) override {
    const size_t allowed = fs_.Reserve(n);
    RETURN_IF_ERROR(file_->Append(data, allowed));
    if (allowed < n) return fs_.Fail(file_->path());
    return absl::OkStatus();
  }
  absl::Status Close(Sync sync) override { return file_->Close(sync); }
  const std::string& path() const override { return file_->path(); }

 private:
  FaultyFileSystem& fs_;
  std::unique_ptr<WritableFile> file_;
};

absl::StatusOr<std::unique_ptr<WritableFile>> FaultyFileSystem::NewWritableFile(
    const std::string& path) {
  absl::StatusOr<std::unique_ptr<WritableFile>> file = base_.NewWritableFile(path);
  if (!file.ok()) return file.status();
  return std::make_unique<FaultyWritableFile>(*this, *std::move(file));
}

size_t FaultyFileSystem::Reserve(size_t n) {
  const int64_t before = bytes_written_.fetch_add(static_cast<int64_t>(n));
  const int64_t left = std::max<int64_t>(spec_.at_byte - before, 0);
  return static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(n)));
}

absl::Status FaultyFileSystem::Fail(const std::string& path) const {
  switch (spec_.fault) {
    case FileFault::kCrash:
      ::kill(::getpid(), SIGKILL);
      ::pause();  // SIGKILL cannot be caught; delivery is immediate for the calling thread.
      break;
    case FileFault::kNoSpace:
      return ErrnoStatus(ENOSPC, "cannot write", path);
    case FileFault::kIoError:
      return ErrnoStatus(EIO, "cannot write", path);
  }
  return absl::InternalError("unreachable");
}

}  // namespace mt
