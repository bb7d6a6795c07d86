// Test helpers for the data/ tests: fresh temporary directories, whole-file reads and writes,
// directory listings, and an indexed dataset read back as documents. testonly.
#ifndef MT_DATA_INDEXED_TESTUTIL_H_
#define MT_DATA_INDEXED_TESTUTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "data/indexed/indexed_dataset.h"

namespace mt {
namespace data {
namespace testing {

// ::testing::TempDir() + name as a fresh, empty directory (stale files from an earlier run would
// change what the tests see).
std::string FreshTestDir(const std::string& name);

// The bytes of a file ("" if it cannot be read).
std::string ReadFileBytes(const std::string& path);
// Replaces the file's contents with `bytes`.
void WriteFileBytes(const std::string& path, const std::string& bytes);

// The names in `dir` other than . and .., sorted.
std::vector<std::string> ListDir(const std::string& dir);

// A document as its sequences of token ids.
using TestDoc = std::vector<std::vector<int32_t>>;
// Every document of the indexed dataset at `prefix`. EXPECTs that it opens and that its token
// dtype is `dtype`; {} if it does not open.
std::vector<TestDoc> ReadDocuments(const std::string& prefix, TokenDType dtype = TokenDType::kU16);

}  // namespace testing
}  // namespace data
}  // namespace mt

#endif  // MT_DATA_INDEXED_TESTUTIL_H_
