#include "tools/fuzz/fuzz_files.h"

#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mt {
namespace fuzz {
namespace {

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

void RemoveScratchDir() { nftw(ScratchDir().c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS); }

}  // namespace

const std::string& ScratchDir() {
  static const std::string* dir = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    if (base == nullptr) base = std::getenv("TMPDIR");
    std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/mt_fuzz_XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      perror("fuzz: mkdtemp");
      abort();
    }
    auto* made = new std::string(pattern);
    atexit(RemoveScratchDir);
    return made;
  }();
  return *dir;
}

void MakeScratchDirs(absl::string_view relative_dir) {
  std::string path = ScratchDir();
  for (absl::string_view part : absl::StrSplit(relative_dir, '/', absl::SkipEmpty())) {
    absl::StrAppend(&path, "/", part);
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      perror(path.c_str());
      abort();
    }
  }
}

std::string WriteScratchFile(absl::string_view name, absl::string_view bytes) {
  std::string path = absl::StrCat(ScratchDir(), "/", name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    perror(path.c_str());
    abort();
  }
  return path;
}

}  // namespace fuzz
}  // namespace mt
