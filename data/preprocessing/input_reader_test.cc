#include "data/preprocessing/input_reader.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

std::string TestFile(const std::string& name, const std::string& contents) {
  const std::string path = ::testing::TempDir() + "input_reader_" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << contents;
  return path;
}

struct Rec {
  std::string text;
  int32_t file;
  int64_t line;
  bool operator==(const Rec& o) const { return text == o.text && file == o.file && line == o.line; }
};

std::ostream& operator<<(std::ostream& os, const Rec& r) {
  return os << "{'" << r.text << "' file " << r.file << " line " << r.line << "}";
}

// All records, reading with the given chunk size; also checks the byte accounting.
std::vector<Rec> ReadAll(const std::vector<std::string>& paths, InputFormat format,
                         const std::string& separator, int64_t chunk_bytes,
                         int* num_chunks = nullptr) {
  absl::StatusOr<std::unique_ptr<InputReader>> reader =
      InputReader::Open(paths, format, separator, chunk_bytes);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return {};
  std::vector<Rec> out;
  InputChunk chunk;
  int64_t bytes = 0;
  int chunks = 0;
  for (;;) {
    absl::StatusOr<bool> got = (*reader)->Next(&chunk);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok() || !*got) break;
    ++chunks;
    EXPECT_FALSE(chunk.records.empty());
    for (const InputRecord& r : chunk.records) {
      out.push_back(Rec{std::string(chunk.text(r)), r.file, r.line});
    }
    bytes += chunk.input_bytes;
  }
  EXPECT_TRUE(chunk.records.empty());
  EXPECT_LE(bytes, (*reader)->total_bytes());
  EXPECT_EQ((*reader)->bytes_read(), (*reader)->total_bytes());
  if (num_chunks != nullptr) *num_chunks = chunks;
  return out;
}

TEST(InputReaderTest, JsonlLinesSkippingBlankOnes) {
  const std::string a = TestFile("a.jsonl", "{\"text\": \"one\"}\n\n  \n{\"text\": \"two\"}\r\n{}");
  const std::string b = TestFile("b.jsonl", "{\"x\": 1}\n");
  for (int64_t chunk : {1, 5, 1 << 20}) {
    const std::vector<Rec> got = ReadAll({a, b}, InputFormat::kJsonl, "", chunk);
    const std::vector<Rec> want = {{"{\"text\": \"one\"}", 0, 1},
                                   {"{\"text\": \"two\"}\r", 0, 4},
                                   {"{}", 0, 5},
                                   {"{\"x\": 1}", 1, 1}};
    EXPECT_EQ(got, want) << "chunk " << chunk;
  }
}

TEST(InputReaderTest, TextDocumentsWithSeparator) {
  const std::string a =
      TestFile("a.txt", "%\nfirst line\nsecond\n%\n%\n\nthird doc\r\n%\r\nlast without newline");
  const std::string b = TestFile("b.txt", "other file\n%\n%\n\n%\n");
  const std::vector<Rec> got = ReadAll({a, b}, InputFormat::kText, "%", 1 << 20);
  const std::vector<Rec> want = {{"first line\nsecond", 0, 2},
                                 {"\nthird doc", 0, 6},
                                 {"last without newline", 0, 9},
                                 {"other file", 1, 1},
                                 {"", 1, 4}};  // A blank line is a document (empty).
  EXPECT_EQ(got, want);
}

TEST(InputReaderTest, DefaultSeparatorIsABlankLine) {
  const std::string a = TestFile("para.txt", "para one\nstill one\n\n\n\npara two\n \nsame\n");
  const std::vector<Rec> got = ReadAll({a}, InputFormat::kText, "", 1 << 20);
  // " " is not the separator (only an exactly empty line is).
  const std::vector<Rec> want = {{"para one\nstill one", 0, 1}, {"para two\n \nsame", 0, 6}};
  EXPECT_EQ(got, want);
}

TEST(InputReaderTest, ChunksHoldWholeRecords) {
  std::string contents;
  for (int i = 0; i < 100; ++i) contents += absl::StrCat("document number ", i, "\n%\n");
  const std::string a = TestFile("many.txt", contents);
  int chunks = 0;
  const std::vector<Rec> small = ReadAll({a}, InputFormat::kText, "%", 40, &chunks);
  ASSERT_EQ(small.size(), 100u);
  EXPECT_GT(chunks, 30);  // 3 records (17-18 bytes each) per 40-byte chunk.
  const std::vector<Rec> big = ReadAll({a}, InputFormat::kText, "%", 1 << 20, &chunks);
  EXPECT_EQ(chunks, 1);
  EXPECT_EQ(small, big);
  EXPECT_EQ(small[42].text, "document number 42");
  EXPECT_EQ(small[42].line, 85);
}

TEST(InputReaderTest, LongLinesAndNulBytes) {
  const std::string long_text(3 << 20, 'x');
  const std::string a = TestFile("long.txt", long_text + "\n%\n" + std::string("a\0b", 3));
  const std::vector<Rec> got = ReadAll({a}, InputFormat::kText, "%", 1000);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].text, long_text);
  EXPECT_EQ(got[1].text, std::string("a\0b", 3));
}

TEST(InputReaderTest, EmptyInput) {
  const std::string a = TestFile("empty.txt", "");
  EXPECT_TRUE(ReadAll({a, a}, InputFormat::kText, "%", 10).empty());
  EXPECT_TRUE(ReadAll({a}, InputFormat::kJsonl, "", 10).empty());
}

TEST(InputReaderTest, Errors) {
  const std::string a = TestFile("ok.txt", "x\n");
  absl::StatusOr<std::unique_ptr<InputReader>> r =
      InputReader::Open({a, "/nonexistent/in.jsonl"}, InputFormat::kJsonl, "", 10);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/in.jsonl"), std::string::npos);
  EXPECT_EQ(InputReader::Open({}, InputFormat::kJsonl, "", 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InputReader::Open({a}, InputFormat::kJsonl, "", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InputFormatName(InputFormat::kText), "text");
  EXPECT_EQ(InputFormatName(InputFormat::kJsonl), "jsonl");
}

}  // namespace
}  // namespace data
}  // namespace mt
