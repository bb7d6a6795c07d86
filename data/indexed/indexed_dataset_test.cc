#include "data/indexed/indexed_dataset.h"

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/indexed/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

// ---------------------------------------------------------------------------------------------
// Independent byte-level helpers: little-endian encoding and decoding by shifts (no memcpy), so
// the tests do not share the implementation's assumptions.

void PutLE(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLE(const std::string& s, size_t offset, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s.at(offset + i))) << (8 * i);
  }
  return v;
}

using testing::ListDir;
using testing::ReadFileBytes;
using testing::WriteFileBytes;

std::string TestDir(const std::string& name) { return testing::FreshTestDir("indexed_" + name); }

// A dataset described as documents of sequences of token ids.
using Docs = std::vector<std::vector<std::vector<int64_t>>>;

struct Files {
  std::string idx;
  std::string bin;
};

// Builds .idx/.bin bytes straight from the format's table (indexed_dataset.h).
Files HandBuild(const Docs& docs, uint8_t code, int item) {
  std::vector<int64_t> lengths, doc_indices{0};
  Files f;
  for (const auto& doc : docs) {
    for (const auto& seq : doc) {
      lengths.push_back(static_cast<int64_t>(seq.size()));
      for (int64_t t : seq) PutLE(&f.bin, static_cast<uint64_t>(t), item);
    }
    doc_indices.push_back(static_cast<int64_t>(lengths.size()));
  }
  f.idx = std::string("MMIDIDX\0\0", 9);  // offset 0: magic
  PutLE(&f.idx, 1, 8);                    // offset 9: version
  PutLE(&f.idx, code, 1);                 // offset 17: dtype code
  PutLE(&f.idx, lengths.size(), 8);       // offset 18: N
  PutLE(&f.idx, doc_indices.size(), 8);   // offset 26: D + 1
  for (int64_t l : lengths) PutLE(&f.idx, static_cast<uint64_t>(l), 4);
  int64_t pointer = 0;
  for (int64_t l : lengths) {
    PutLE(&f.idx, static_cast<uint64_t>(pointer), 8);
    pointer += l * item;
  }
  for (int64_t d : doc_indices) PutLE(&f.idx, static_cast<uint64_t>(d), 8);
  return f;
}

void WriteFiles(const std::string& prefix, const Files& f) {
  WriteFileBytes(prefix + ".idx", f.idx);
  WriteFileBytes(prefix + ".bin", f.bin);
}

// Three documents: two sequences (sentences), an empty document, one sequence with the u16
// extremes.
const Docs kDocs = {
    {{5, 6, 7}, {8}},
    {},
    {{65535, 0, 1, 50256, 9}},
};

void ExpectDatasetEquals(const IndexedDataset& ds, const Docs& docs) {
  ASSERT_EQ(ds.num_documents(), static_cast<int64_t>(docs.size()));
  int64_t seq = 0, tokens = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    EXPECT_EQ(ds.document_index(d), seq);
    std::vector<int64_t> flat;
    for (const auto& s : docs[d]) {
      ASSERT_LT(seq, ds.num_sequences());
      EXPECT_EQ(ds.sequence_length(seq), static_cast<int32_t>(s.size()));
      EXPECT_EQ(ds.sequence_pointer(seq),
                tokens * static_cast<int64_t>(TokenDTypeSize(ds.dtype())));
      EXPECT_EQ(ds.sequence(seq).ToVector(), s) << "sequence " << seq;
      flat.insert(flat.end(), s.begin(), s.end());
      tokens += static_cast<int64_t>(s.size());
      ++seq;
    }
    EXPECT_EQ(ds.document(d).ToVector(), flat) << "document " << d;
    EXPECT_EQ(ds.document_length(d), static_cast<int64_t>(flat.size()));
  }
  EXPECT_EQ(ds.document_index(docs.size()), seq);
  EXPECT_EQ(ds.num_sequences(), seq);
  EXPECT_EQ(ds.num_tokens(), tokens);
}

TEST(TokenDTypeTest, CodesSizesNamesAndVocabRule) {
  const struct {
    uint8_t code;
    TokenDType dtype;
    size_t size;
    const char* name;
  } kCases[] = {{1, TokenDType::kU8, 1, "u8"},   {2, TokenDType::kI8, 1, "i8"},
                {3, TokenDType::kI16, 2, "i16"}, {4, TokenDType::kI32, 4, "i32"},
                {5, TokenDType::kI64, 8, "i64"}, {6, TokenDType::kF64, 8, "f64"},
                {7, TokenDType::kF32, 4, "f32"}, {8, TokenDType::kU16, 2, "u16"}};
  for (const auto& c : kCases) {
    absl::StatusOr<TokenDType> dt = TokenDTypeFromCode(c.code);
    ASSERT_TRUE(dt.ok());
    EXPECT_EQ(*dt, c.dtype);
    EXPECT_EQ(TokenDTypeSize(c.dtype), c.size);
    EXPECT_EQ(TokenDTypeName(c.dtype), c.name);
  }
  EXPECT_EQ(TokenDTypeFromCode(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenDTypeFromCode(9).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenDTypeForVocab(1), TokenDType::kU16);
  EXPECT_EQ(TokenDTypeForVocab(50257), TokenDType::kU16);  // GPT-2
  EXPECT_EQ(TokenDTypeForVocab(30522), TokenDType::kU16);  // BERT
  EXPECT_EQ(TokenDTypeForVocab(65499), TokenDType::kU16);
  EXPECT_EQ(TokenDTypeForVocab(65500), TokenDType::kI32);
  EXPECT_EQ(TokenDTypeForVocab(250000), TokenDType::kI32);
}

// (a) A dataset written byte by byte from the format's layout reads back exactly.
TEST(IndexedDatasetTest, ReadsHandBuiltU16Dataset) {
  const std::string prefix = TestDir("hand") + "/u16";
  WriteFiles(prefix, HandBuild(kDocs, /*code=*/8, /*item=*/2));
  absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->dtype(), TokenDType::kU16);
  EXPECT_EQ((*ds)->prefix(), prefix);
  EXPECT_EQ((*ds)->num_sequences(), 3);
  EXPECT_EQ((*ds)->num_documents(), 3);
  EXPECT_EQ((*ds)->num_tokens(), 9);
  ExpectDatasetEquals(**ds, kDocs);
  // Zero-copy typed views.
  absl::Span<const uint16_t> s2 = (*ds)->sequence(2).as<uint16_t>();
  EXPECT_EQ(std::vector<uint16_t>(s2.begin(), s2.end()),
            (std::vector<uint16_t>{65535, 0, 1, 50256, 9}));
  std::vector<int32_t> out(5);
  (*ds)->document(2).CopyTo(absl::MakeSpan(out));
  EXPECT_EQ(out, (std::vector<int32_t>{65535, 0, 1, 50256, 9}));
  EXPECT_EQ((*ds)->document(0).Subview(1, 2).ToVector(), (std::vector<int64_t>{6, 7}));
}

TEST(IndexedDatasetTest, ReadsHandBuiltDatasetsOfEveryIntegerDType) {
  const struct {
    uint8_t code;
    int item;
    std::vector<int64_t> values;
  } kCases[] = {
      {1, 1, {0, 1, 200, 255}},
      {2, 1, {-128, -1, 0, 127}},
      {3, 2, {-32768, -2, 3, 32767}},
      {4, 4, {-2147483647 - 1, 70000, 2147483647, 17}},
      {5, 8, {int64_t{1} << 40, -(int64_t{1} << 50), 3, 4}},
      {8, 2, {0, 65535, 30000, 12}},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(static_cast<int>(c.code));
    const Docs docs = {{{c.values[0], c.values[1]}}, {{c.values[2]}, {c.values[3]}}};
    const std::string prefix = TestDir("dtypes") + "/c" + std::to_string(c.code);
    WriteFiles(prefix, HandBuild(docs, c.code, c.item));
    absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(prefix);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(static_cast<uint8_t>((*ds)->dtype()), c.code);
    ExpectDatasetEquals(**ds, docs);
  }
}

TEST(IndexedDatasetTest, ReadsFloatDTypesAsTypedViews) {
  // Megatron can store any numpy dtype; f32/f64 read back through typed views.
  const std::string prefix = TestDir("float") + "/f32";
  Files f = HandBuild({{{0, 0, 0}}}, /*code=*/7, /*item=*/4);
  f.bin.clear();
  for (float v : {1.5f, -2.25f, 1e30f}) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    PutLE(&f.bin, bits, 4);
  }
  WriteFiles(prefix, f);
  absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::Span<const float> v = (*ds)->sequence(0).as<float>();
  EXPECT_EQ(std::vector<float>(v.begin(), v.end()), (std::vector<float>{1.5f, -2.25f, 1e30f}));
}

TEST(IndexedDatasetTest, ReadsEmptyDataset) {
  const std::string prefix = TestDir("emptyds") + "/e";
  WriteFiles(prefix, HandBuild({}, 8, 2));
  absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_sequences(), 0);
  EXPECT_EQ((*ds)->num_documents(), 0);
  EXPECT_EQ((*ds)->num_tokens(), 0);
}

// (b) The writer produces exactly the format's layout, parsed here byte by byte.
TEST(IndexedDatasetWriterTest, WritesExactlyTheMegatronLayout) {
  for (TokenDType dtype : {TokenDType::kU16, TokenDType::kI32}) {
    SCOPED_TRACE(std::string(TokenDTypeName(dtype)));
    const int item = dtype == TokenDType::kU16 ? 2 : 4;
    const std::string prefix = TestDir("layout") + "/" + std::string(TokenDTypeName(dtype));
    {
      absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
          IndexedDatasetWriter::Create(prefix, dtype);
      ASSERT_TRUE(w.ok()) << w.status();
      const std::vector<int32_t> a = {5, 6, 7}, b = {8}, c = {65535, 0, 1, 50256, 9};
      ASSERT_TRUE((*w)->AddSequence(a).ok());
      ASSERT_TRUE((*w)->AddSequence(std::vector<int64_t>{8}).ok());
      ASSERT_TRUE((*w)->EndDocument().ok());
      ASSERT_TRUE((*w)->EndDocument().ok());  // An empty document.
      ASSERT_TRUE((*w)->AddDocument(c).ok());
      EXPECT_EQ((*w)->num_sequences(), 3);
      EXPECT_EQ((*w)->num_documents(), 3);
      EXPECT_EQ((*w)->num_tokens(), 9);
      ASSERT_TRUE((*w)->Finalize().ok());
    }
    // The hand-built bytes of test (a) are the specification.
    const Files expected = HandBuild(kDocs, static_cast<uint8_t>(dtype), item);
    const std::string idx = ReadFileBytes(prefix + ".idx");
    const std::string bin = ReadFileBytes(prefix + ".bin");
    EXPECT_EQ(idx, expected.idx);
    EXPECT_EQ(bin, expected.bin);
    // And field by field, at the format's offsets.
    ASSERT_EQ(idx.size(), 34u + 4 * 3 + 8 * 3 + 8 * 4);
    EXPECT_EQ(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
    EXPECT_EQ(GetLE(idx, 9, 8), 1u);
    EXPECT_EQ(GetLE(idx, 17, 1), static_cast<uint64_t>(dtype == TokenDType::kU16 ? 8 : 4));
    EXPECT_EQ(GetLE(idx, 18, 8), 3u);
    EXPECT_EQ(GetLE(idx, 26, 8), 4u);
    const size_t lengths = 34, pointers = lengths + 4 * 3, docs = pointers + 8 * 3;
    EXPECT_EQ(GetLE(idx, lengths + 0, 4), 3u);
    EXPECT_EQ(GetLE(idx, lengths + 4, 4), 1u);
    EXPECT_EQ(GetLE(idx, lengths + 8, 4), 5u);
    EXPECT_EQ(GetLE(idx, pointers + 0, 8), 0u);
    EXPECT_EQ(GetLE(idx, pointers + 8, 8), 3u * item);
    EXPECT_EQ(GetLE(idx, pointers + 16, 8), 4u * item);
    EXPECT_EQ(GetLE(idx, docs + 0, 8), 0u);
    EXPECT_EQ(GetLE(idx, docs + 8, 8), 2u);
    EXPECT_EQ(GetLE(idx, docs + 16, 8), 2u);
    EXPECT_EQ(GetLE(idx, docs + 24, 8), 3u);
    ASSERT_EQ(bin.size(), 9u * item);
    const std::vector<uint64_t> tokens = {5, 6, 7, 8, 65535, 0, 1, 50256, 9};
    for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(GetLE(bin, i * item, item), tokens[i]);
  }
}

TEST(IndexedDatasetWriterTest, RoundTripsALargeStreamedDataset) {
  // Several MiB through the 1 MiB write buffer, documents of odd lengths, i32 values above u16.
  const std::string prefix = TestDir("large") + "/big";
  Docs docs;
  uint64_t state = 12345;
  auto next = [&state]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  {
    absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
        IndexedDatasetWriter::CreateForVocab(prefix, 100000);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ((*w)->dtype(), TokenDType::kI32);
    for (int d = 0; d < 300; ++d) {
      docs.emplace_back();
      const int num_seqs = 1 + static_cast<int>(next() % 3);
      for (int s = 0; s < num_seqs; ++s) {
        std::vector<int32_t> seq(next() % 6000);
        for (int32_t& t : seq) t = static_cast<int32_t>(next() % 100000);
        docs.back().emplace_back(seq.begin(), seq.end());
        ASSERT_TRUE((*w)->AddSequence(seq).ok());
      }
      ASSERT_TRUE((*w)->EndDocument().ok());
    }
    ASSERT_TRUE((*w)->Finalize().ok());
  }
  absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_GT((*ds)->num_tokens(), 1 << 20);
  ExpectDatasetEquals(**ds, docs);
}

TEST(IndexedDatasetWriterTest, RejectsTokensOutsideTheDTypeAndKeepsGoing) {
  const std::string prefix = TestDir("range") + "/r";
  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
      IndexedDatasetWriter::Create(prefix, TokenDType::kU16);
  ASSERT_TRUE(w.ok());
  absl::Status s = (*w)->AddSequence(std::vector<int32_t>{1, 65536});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("65536"), std::string::npos) << s;
  EXPECT_EQ((*w)->AddSequence(std::vector<int32_t>{-1}).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*w)->num_sequences(), 0);  // Nothing was written.
  ASSERT_TRUE((*w)->AddDocument(std::vector<int32_t>{3, 4}).ok());
  ASSERT_TRUE((*w)->Finalize().ok());
  absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectDatasetEquals(**ds, {{{3, 4}}});
}

TEST(IndexedDatasetWriterTest, MisuseGivesClearErrors) {
  const std::string dir = TestDir("misuse");
  EXPECT_EQ(IndexedDatasetWriter::Create(dir + "/f", TokenDType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IndexedDatasetWriter::CreateForVocab(dir + "/v", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IndexedDatasetWriter::Create(dir + "/no/such/dir/x", TokenDType::kU16).status().code(),
            absl::StatusCode::kNotFound);

  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
      IndexedDatasetWriter::Create(dir + "/open", TokenDType::kU16);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->AddSequence(std::vector<int32_t>{1}).ok());
  absl::Status s = (*w)->Finalize();  // The document is still open.
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("EndDocument"), std::string::npos) << s;
  ASSERT_TRUE((*w)->EndDocument().ok());
  ASSERT_TRUE((*w)->Finalize().ok());
  EXPECT_EQ((*w)->Finalize().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*w)->AddSequence(std::vector<int32_t>{1}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(IndexedDatasetWriterTest, AbandonedWriterLeavesOldDatasetUntouched) {
  const std::string dir = TestDir("atomic");
  const std::string prefix = dir + "/d";
  WriteFiles(prefix, HandBuild(kDocs, 8, 2));
  {
    absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
        IndexedDatasetWriter::Create(prefix, TokenDType::kU16);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddDocument(std::vector<int32_t>(100000, 42)).ok());
    // Destroyed without Finalize.
  }
  EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"d.bin", "d.idx"}));
  absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectDatasetEquals(**ds, kDocs);
}

// (d) Merging, as Megatron's merge_datasets tool does with add_index.
TEST(IndexedDatasetWriterTest, AppendMergesDatasets) {
  const std::string dir = TestDir("merge");
  const Docs a = {{{1, 2}, {3}}, {{4}}};
  const Docs b = {{}, {{7, 8, 9}}, {{10}, {11, 12}}};
  WriteFiles(dir + "/a", HandBuild(a, 8, 2));
  WriteFiles(dir + "/b", HandBuild(b, 8, 2));
  absl::StatusOr<std::unique_ptr<IndexedDataset>> da = IndexedDataset::Open(dir + "/a");
  absl::StatusOr<std::unique_ptr<IndexedDataset>> db = IndexedDataset::Open(dir + "/b");
  ASSERT_TRUE(da.ok() && db.ok());
  {
    absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
        IndexedDatasetWriter::Create(dir + "/ab", TokenDType::kU16);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(**da).ok());
    ASSERT_TRUE((*w)->AddDocument(std::vector<int32_t>{99}).ok());
    ASSERT_TRUE((*w)->Append(**db).ok());
    ASSERT_TRUE((*w)->Finalize().ok());
  }
  Docs ab = a;
  ab.push_back({{99}});
  ab.insert(ab.end(), b.begin(), b.end());
  // Byte-identical to building the merged dataset by hand.
  const Files expected = HandBuild(ab, 8, 2);
  EXPECT_EQ(ReadFileBytes(dir + "/ab.idx"), expected.idx);
  EXPECT_EQ(ReadFileBytes(dir + "/ab.bin"), expected.bin);

  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
      IndexedDatasetWriter::Create(dir + "/bad", TokenDType::kI32);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->Append(**da).code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w2 =
      IndexedDatasetWriter::Create(dir + "/bad2", TokenDType::kU16);
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE((*w2)->AddSequence(std::vector<int32_t>{1}).ok());
  EXPECT_EQ((*w2)->Append(**da).code(), absl::StatusCode::kFailedPrecondition);
}

// (c) Every kind of corruption gives the right code and a message naming the file and problem.
struct Corruption {
  std::string name;
  std::function<void(Files*)> mutate;
  absl::StatusCode code;
  std::string file;     // ".idx" or ".bin": the file the message must name.
  std::string message;  // A substring of the message.
};

// Offsets in HandBuild(kDocs, u16): N = 3, D + 1 = 4.
constexpr size_t kLengths = 34, kPointers = 34 + 12, kDocIdx = 34 + 36;

void Poke(std::string* s, size_t offset, uint64_t v, int bytes) {
  std::string enc;
  PutLE(&enc, v, bytes);
  s->replace(offset, bytes, enc);
}

TEST(IndexedDatasetTest, CorruptFilesGiveClearErrors) {
  using C = absl::StatusCode;
  const std::vector<Corruption> cases = {
      {"bad_magic", [](Files* f) { f->idx[0] = 'X'; }, C::kInvalidArgument, ".idx", "bad magic"},
      {"magic_tail", [](Files* f) { f->idx[8] = '\1'; }, C::kInvalidArgument, ".idx", "bad magic"},
      {"version", [](Files* f) { Poke(&f->idx, 9, 2, 8); }, C::kInvalidArgument, ".idx",
       "unsupported version 2"},
      {"dtype_9", [](Files* f) { f->idx[17] = 9; }, C::kInvalidArgument, ".idx",
       "unknown dtype code 9"},
      {"dtype_0", [](Files* f) { f->idx[17] = 0; }, C::kInvalidArgument, ".idx",
       "unknown dtype code 0"},
      {"empty_idx", [](Files* f) { f->idx.clear(); }, C::kDataLoss, ".idx", "truncated"},
      {"header_cut", [](Files* f) { f->idx.resize(20); }, C::kDataLoss, ".idx", "truncated"},
      {"body_cut", [](Files* f) { f->idx.resize(f->idx.size() - 8); }, C::kDataLoss, ".idx",
       "truncated"},
      {"trailing", [](Files* f) { f->idx.push_back('\0'); }, C::kDataLoss, ".idx",
       "trailing bytes"},
      {"count_n", [](Files* f) { Poke(&f->idx, 18, 4, 8); }, C::kDataLoss, ".idx",
       "4 sequences and 3 documents"},
      {"count_huge", [](Files* f) { Poke(&f->idx, 18, uint64_t{1} << 62, 8); }, C::kDataLoss,
       ".idx", "truncated or corrupt"},
      {"count_d", [](Files* f) { Poke(&f->idx, 26, 3, 8); }, C::kDataLoss, ".idx",
       "trailing bytes"},
      {"count_d_zero", [](Files* f) { Poke(&f->idx, 26, 0, 8); }, C::kDataLoss, ".idx",
       "document count field is 0"},
      {"negative_length", [](Files* f) { Poke(&f->idx, kLengths + 4, 0xffffffff, 4); },
       C::kDataLoss, ".idx", "sequence_lengths[1] = -1 is negative"},
      {"length_past_end", [](Files* f) { Poke(&f->idx, kLengths + 8, 6, 4); }, C::kDataLoss, ".bin",
       "sequence 2 (bytes [8, 20)) lies past the end"},
      {"pointer_past_end", [](Files* f) { Poke(&f->idx, kPointers + 16, 1000, 8); }, C::kDataLoss,
       ".bin", "past the end"},
      {"pointer_negative", [](Files* f) { Poke(&f->idx, kPointers + 8, ~uint64_t{0}, 8); },
       C::kDataLoss, ".bin", "past the end"},
      {"pointer_gap", [](Files* f) { Poke(&f->idx, kPointers + 8, 4, 8); }, C::kDataLoss, ".idx",
       "sequence_pointers[1] = 4, expected 6"},
      {"bin_short", [](Files* f) { f->bin.resize(f->bin.size() - 2); }, C::kDataLoss, ".bin",
       "past the end"},
      {"bin_long", [](Files* f) { f->bin += "xx"; }, C::kDataLoss, ".bin",
       "size mismatch: the file has 20 bytes"},
      {"bin_empty", [](Files* f) { f->bin.clear(); }, C::kDataLoss, ".bin", "past the end"},
      {"docs_start", [](Files* f) { Poke(&f->idx, kDocIdx, 1, 8); }, C::kDataLoss, ".idx",
       "document_indices[0] = 1, expected 0"},
      {"docs_decrease", [](Files* f) { Poke(&f->idx, kDocIdx + 16, 1, 8); }, C::kDataLoss, ".idx",
       "document_indices decrease at 2 (2 then 1)"},
      {"docs_end_short", [](Files* f) { Poke(&f->idx, kDocIdx + 24, 2, 8); }, C::kDataLoss, ".idx",
       "document_indices end at 2, expected the sequence count 3"},
      {"docs_end_long", [](Files* f) { Poke(&f->idx, kDocIdx + 24, 7, 8); }, C::kDataLoss, ".idx",
       "document_indices end at 7"},
  };
  const std::string dir = TestDir("corrupt");
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.name);
    Files f = HandBuild(kDocs, 8, 2);
    ASSERT_EQ(f.bin.size(), 18u);
    c.mutate(&f);
    const std::string prefix = dir + "/" + c.name;
    WriteFiles(prefix, f);
    absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(prefix);
    ASSERT_FALSE(ds.ok());
    EXPECT_EQ(ds.status().code(), c.code) << ds.status();
    EXPECT_NE(ds.status().message().find(prefix + c.file), std::string::npos) << ds.status();
    EXPECT_NE(ds.status().message().find(c.message), std::string::npos) << ds.status();
  }
}

TEST(IndexedDatasetTest, MissingFilesAreNotFound) {
  const std::string dir = TestDir("missing");
  absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(dir + "/none");
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find(dir + "/none.idx"), std::string::npos) << ds.status();

  const Files f = HandBuild(kDocs, 8, 2);
  WriteFileBytes(dir + "/only_idx.idx", f.idx);
  ds = IndexedDataset::Open(dir + "/only_idx");
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find(dir + "/only_idx.bin"), std::string::npos) << ds.status();
}

TEST(TokenViewDeathTest, TypedAccessChecksTheDType) {
  const uint16_t data[2] = {1, 2};
  TokenView v(data, 2, TokenDType::kU16);
  EXPECT_DEATH(v.as<int32_t>(), "tokens are u16, read as i32");
  EXPECT_DEATH(v[2], "out of range");
  EXPECT_DEATH(v.Subview(1, 2), "subview");
}

}  // namespace
}  // namespace data
}  // namespace mt
