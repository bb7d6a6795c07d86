#include "eval/testutil.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gtest/gtest.h"

namespace mt {
namespace eval {

std::string TestDataPath(absl::string_view relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  CHECK(srcdir != nullptr) << "TEST_SRCDIR is not set; run under bazel test";
  return absl::StrCat(srcdir, "/megatron_cpp/eval/testdata/", relative);
}

std::string MakeTestDir(absl::string_view relative) {
  const std::string path = absl::StrCat(::testing::TempDir(), relative);
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) ADD_FAILURE() << "creating " << path << ": " << error.message();
  return path;
}

std::string WriteTestFile(absl::string_view relative, absl::string_view contents) {
  const std::string path = absl::StrCat(::testing::TempDir(), relative);
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  FILE* f = error ? nullptr : std::fopen(path.c_str(), "wb");
  const bool written =
      f != nullptr && std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
  if (f == nullptr || std::fclose(f) != 0 || !written) {
    ADD_FAILURE() << "writing " << path << ": " << (error ? error.message() : "failed");
  }
  return path;
}

}  // namespace eval
}  // namespace mt
