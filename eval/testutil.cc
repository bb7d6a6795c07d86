#include "eval/testutil.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "data/tokenizers/factory.h"
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
  CHECK(!error) << path << ": " << error.message();
  return path;
}

std::string WriteTestFile(absl::string_view relative, absl::string_view contents) {
  const std::string path = absl::StrCat(::testing::TempDir(), relative);
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  CHECK(!error) << path << ": " << error.message();
  FILE* f = std::fopen(path.c_str(), "wb");
  CHECK(f != nullptr) << path;
  CHECK_EQ(std::fwrite(contents.data(), 1, contents.size(), f), contents.size()) << path;
  CHECK_EQ(std::fclose(f), 0) << path;
  return path;
}

const data::Tokenizer& TestTokenizer(absl::string_view name) {
  static std::mutex mu;
  static auto* const made = new std::map<std::string, std::unique_ptr<data::Tokenizer>>;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<data::Tokenizer>& tok = (*made)[std::string(name)];
  if (tok == nullptr) {
    absl::StatusOr<std::unique_ptr<data::Tokenizer>> t = data::CreateTokenizer(name);
    CHECK(t.ok()) << t.status();
    tok = *std::move(t);
  }
  return *tok;
}

}  // namespace eval
}  // namespace mt
