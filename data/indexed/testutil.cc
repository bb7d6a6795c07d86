#include "data/indexed/testutil.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace testing {

std::string FreshTestDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<TestDoc> ReadDocuments(const std::string& prefix, TokenDType dtype) {
  absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(prefix);
  EXPECT_TRUE(ds.ok()) << ds.status();
  if (!ds.ok()) return {};
  EXPECT_EQ((*ds)->dtype(), dtype);
  std::vector<TestDoc> docs;
  for (int64_t d = 0; d < (*ds)->num_documents(); ++d) {
    TestDoc doc;
    for (int64_t s = (*ds)->document_index(d); s < (*ds)->document_index(d + 1); ++s) {
      std::vector<int32_t> seq;
      for (int64_t v : (*ds)->sequence(s).ToVector()) seq.push_back(static_cast<int32_t>(v));
      doc.push_back(seq);
    }
    docs.push_back(doc);
  }
  return docs;
}

}  // namespace testing
}  // namespace data
}  // namespace mt
