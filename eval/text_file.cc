#include "eval/text_file.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mt {
namespace eval {
namespace {

absl::Status PathError(int error_number, absl::string_view what, absl::string_view path) {
  return absl::ErrnoToStatus(error_number, absl::StrCat(what, " ", path));
}

// OK if `path` is a directory; NotFound / FailedPrecondition / errno-derived otherwise.
absl::Status CheckIsDirectory(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return PathError(errno, "cannot open directory", path);
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return PathError(errno, "cannot read", path);
  if (S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read ", path, ": a directory"));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (f == nullptr) return PathError(errno, "cannot open", path);
  std::string bytes;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f.get())) > 0) bytes.append(buffer, n);
  if (std::ferror(f.get())) return PathError(errno, "cannot read", path);
  return bytes;
}

absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir,
                                                   absl::string_view suffix) {
  if (absl::Status s = CheckIsDirectory(dir); !s.ok()) return s;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), &::closedir);
  if (d == nullptr) return PathError(errno, "cannot open directory", dir);
  std::vector<std::string> names;
  errno = 0;
  while (const struct dirent* entry = ::readdir(d.get())) {
    const std::string name = entry->d_name;
    struct stat st;
    if (absl::EndsWith(name, suffix) && ::stat(absl::StrCat(dir, "/", name).c_str(), &st) == 0 &&
        S_ISREG(st.st_mode)) {
      names.push_back(name);
    }
    errno = 0;
  }
  if (errno != 0) return PathError(errno, "cannot list directory", dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace eval
}  // namespace mt
