#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/sha256.h"
#include "core/crc32c.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace {

using Json = nlohmann::json;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "safetensors_test_" + name;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Little-endian encodings written out byte by byte, independent of the host's memory layout.
void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint64_t GetLE(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(s[at + i])} << (8 * i);
  return v;
}

// A file per the spec: 8-byte header length, the JSON as given (no padding), then `data`.
std::string SpecFile(const std::string& json, const std::string& data) {
  std::string out;
  PutLE(&out, json.size(), 8);
  return out + json + data;
}

// A host tensor of random bit patterns (NaNs and infinities included for float dtypes).
Tensor RandomBits(Shape shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::Host(std::move(shape), dtype);
  std::mt19937_64 rng(seed);
  auto* p = static_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

std::string Bytes(const TensorView& v) {
  return std::string(static_cast<const char*>(v.data), v.nbytes());
}

// Hand-built file: every dtype, a scalar, an empty tensor, metadata, unpadded header, and a
// header whose key order differs from the data order.
TEST(SafetensorsTest, ReadsFileWrittenByHandPerSpec) {
  std::string data;
  // "w": F32 [2, 2] = 1, -2, 0.5, 3.25 at [0, 16).
  for (uint32_t bits : {0x3F800000u, 0xC0000000u, 0x3F000000u, 0x40500000u}) PutLE(&data, bits, 4);
  // "ids": I64 [3] = 7, -1, 2^40 at [16, 40).
  for (int64_t v : {int64_t{7}, int64_t{-1}, int64_t{1} << 40}) {
    PutLE(&data, static_cast<uint64_t>(v), 8);
  }
  // "h": F16 [3] = 1, -2, 65504 at [40, 46).
  for (uint16_t bits : {0x3C00, 0xC000, 0x7BFF}) PutLE(&data, bits, 2);
  // "b": BF16 [] = 1.5 at [46, 48).
  PutLE(&data, 0x3FC0, 2);
  // "tok": U16 [1, 2] = 50256, 3 at [48, 52).
  for (uint16_t v : {50256, 3}) PutLE(&data, v, 2);
  // "n": I32 [2] = -5, 123456789 at [52, 60).
  for (int32_t v : {-5, 123456789}) PutLE(&data, static_cast<uint32_t>(v), 4);
  // "empty": F32 [0, 4] at [60, 60).
  const std::string json = R"({"tok":{"dtype":"U16","shape":[1,2],"data_offsets":[48,52]},)"
                           R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                           R"("__metadata__":{"format":"pt","note":"h\u00e9"},)"
                           R"("ids":{"dtype":"I64","shape":[3],"data_offsets":[16,40]},)"
                           R"("empty":{"dtype":"F32","shape":[0,4],"data_offsets":[60,60]},)"
                           R"("h":{"dtype":"F16","shape":[3],"data_offsets":[40,46]},)"
                           R"("n":{"dtype":"I32","shape":[2],"data_offsets":[52,60]},)"
                           R"("b":{"dtype":"BF16","shape":[],"data_offsets":[46,48]}})";
  ASSERT_NE(json.size() % 8, 0u) << "the test wants an unpadded header";
  const std::string path = TempPath("by_hand.safetensors");
  WriteBytes(path, SpecFile(json, data));

  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(reader->entries().size(), 7u);
  EXPECT_EQ(reader->metadata().at("format"), "pt");
  EXPECT_EQ(reader->metadata().at("note"), "h\xC3\xA9");
  EXPECT_EQ(reader->metadata().size(), 2u);

  auto w = reader->ReadTensor("w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->dtype(), DType::kF32);
  EXPECT_EQ(w->shape(), (Shape{2, 2}));
  EXPECT_EQ(testing::ToDoubles(w->view()), (std::vector<double>{1, -2, 0.5, 3.25}));

  auto ids = reader->ReadTensor("ids");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->data_as<int64_t>()[0], 7);
  EXPECT_EQ(ids->data_as<int64_t>()[1], -1);
  EXPECT_EQ(ids->data_as<int64_t>()[2], int64_t{1} << 40);

  auto h = reader->ReadTensor("h");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(testing::ToDoubles(h->view()), (std::vector<double>{1, -2, 65504}));

  auto b = reader->ReadTensor("b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->shape(), Shape{});
  EXPECT_EQ(testing::ToDoubles(b->view()), (std::vector<double>{1.5}));

  auto tok = reader->ReadTensor("tok");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->dtype(), DType::kU16);
  EXPECT_EQ(testing::ToDoubles(tok->view()), (std::vector<double>{50256, 3}));

  auto n = reader->ReadTensor("n");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(testing::ToDoubles(n->view()), (std::vector<double>{-5, 123456789}));

  auto empty = reader->ReadTensor("empty");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->shape(), (Shape{0, 4}));

  // Entries come back in data order.
  std::vector<std::string> order;
  for (const SafetensorsEntry& e : reader->entries()) order.push_back(e.name);
  EXPECT_EQ(order, (std::vector<std::string>{"w", "ids", "h", "b", "tok", "n", "empty"}));
}

// ---- The writer's bytes, checked by an independent parse: length prefix and padding decoded by
// hand, the JSON by nlohmann directly, the data by little-endian byte assembly.

struct TensorSpec {
  std::string name;
  Shape shape;
  DType dtype;
};

// A safetensors file split by hand: the header JSON and where the data region starts.
struct HandParsed {
  Json header;
  size_t data_start = 0;
};

// The length prefix, the 4096-byte alignment of the data region, the header's space padding and its
// JSON object.
void ParseByHand(const std::string& file, HandParsed* out) {
  ASSERT_GE(file.size(), 8u);
  const uint64_t n = GetLE(file, 0, 8);
  ASSERT_LE(8 + n, file.size());
  EXPECT_EQ((8 + n) % 4096, 0u) << "data region should start on a page (the format asks for 8)";
  const std::string header = file.substr(8, n);
  ASSERT_EQ(header.front(), '{');
  const size_t last_brace = header.find_last_of('}');
  for (size_t i = last_brace + 1; i < header.size(); ++i) EXPECT_EQ(header[i], ' ');
  out->header = Json::parse(header, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(out->header.is_discarded()) << header;
  ASSERT_TRUE(out->header.is_object());
  out->data_start = 8 + n;
}

// Entry `e` of the header describes `spec` and its data range holds `src`'s elements as
// little-endian numbers; appends the range to *ranges.
void ExpectEntryHolds(const Json& e, const TensorSpec& spec, const Tensor& src,
                      const std::string& file, size_t data_start,
                      std::vector<std::pair<uint64_t, uint64_t>>* ranges) {
  const char* kNames[] = {"F32", "BF16", "F16", "I32", "I64", "U16"};
  const int kSizes[] = {4, 2, 2, 4, 8, 2};
  const int d = static_cast<int>(spec.dtype);
  EXPECT_EQ(e["dtype"], kNames[d]);
  std::vector<int64_t> shape = e["shape"].get<std::vector<int64_t>>();
  EXPECT_EQ(shape, std::vector<int64_t>(spec.shape.begin(), spec.shape.end()));
  const uint64_t begin = e["data_offsets"][0].get<uint64_t>();
  const uint64_t end = e["data_offsets"][1].get<uint64_t>();
  const int64_t numel = NumElements(spec.shape);
  ASSERT_EQ(end - begin, static_cast<uint64_t>(numel * kSizes[d]));
  ranges->push_back({begin, end});
  // Element k of the source, as an integer of the element width, equals the little-endian
  // number in the file.
  const auto* bytes = static_cast<const unsigned char*>(src.data());
  for (int64_t k = 0; k < numel; ++k) {
    uint64_t want = 0;
    for (int b = 0; b < kSizes[d]; ++b) want |= uint64_t{bytes[k * kSizes[d] + b]} << (8 * b);
    ASSERT_EQ(GetLE(file, data_start + begin + k * kSizes[d], kSizes[d]), want) << k;
  }
}

TEST(SafetensorsTest, WriterOutputParsesIndependently) {
  const std::vector<TensorSpec> specs = {
      {"layers.0.weight", {17, 3}, DType::kF32},
      {"layers.0.bias", {129}, DType::kBF16},
      {"half", {3, 1, 5}, DType::kF16},
      {"scalar", {}, DType::kF32},
      {"ids", {1}, DType::kI64},
      {"tokens", {3, 17}, DType::kU16},
      {"counts", {7}, DType::kI32},
      {"nothing", {0}, DType::kF16},
      {"unicode \xE2\x9C\x93", {2}, DType::kF32},
      // Over the writer's 1 MiB: written straight from its memory, not gathered with the others.
      {"big", {3, 100003}, DType::kF32},
  };
  std::vector<Tensor> owned;
  std::vector<NamedTensor> tensors;
  for (size_t i = 0; i < specs.size(); ++i) {
    owned.push_back(RandomBits(specs[i].shape, specs[i].dtype, 100 + i));
  }
  for (size_t i = 0; i < specs.size(); ++i) tensors.push_back({specs[i].name, owned[i].view()});
  const SafetensorsMetadata metadata = {{"format", "pt"}, {"iteration", "100"}};
  const std::string path = TempPath("writer.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata, Sync::kFsync).ok());

  const std::string file = ReadBytes(path);
  HandParsed parsed;
  ASSERT_NO_FATAL_FAILURE(ParseByHand(file, &parsed));
  Json& j = parsed.header;
  EXPECT_EQ(j.size(), specs.size() + 1);
  EXPECT_EQ(j["__metadata__"], (Json{{"format", "pt"}, {"iteration", "100"}}));
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].name);
    ASSERT_TRUE(j.contains(specs[i].name));
    ASSERT_NO_FATAL_FAILURE(
        ExpectEntryHolds(j[specs[i].name], specs[i], owned[i], file, parsed.data_start, &ranges));
  }
  // The ranges tile the data region.
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& r : ranges) {
    EXPECT_EQ(r.first, covered);
    covered = r.second;
  }
  EXPECT_EQ(parsed.data_start + covered, file.size());

  // SerializeSafetensors produces the same bytes.
  auto serialized = SerializeSafetensors(tensors, metadata);
  ASSERT_TRUE(serialized.ok());
  EXPECT_EQ(*serialized, file);

  // So does WriteSafetensorsWithDigests, whose digests are those of each tensor's byte range in
  // the file (hashed here in one piece by Sha256Hex, which sha256_test holds to sha256sum, and
  // Crc32c, which core/crc32c_test holds to the definition).
  const std::string path2 = TempPath("writer_digests.safetensors");
  auto digests = WriteSafetensorsWithDigests(path2, tensors, metadata, Sync::kFsync);
  ASSERT_TRUE(digests.ok()) << digests.status();
  EXPECT_EQ(ReadBytes(path2), file);
  ASSERT_EQ(digests->size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const Json& offsets = j[specs[i].name]["data_offsets"];
    const uint64_t begin = parsed.data_start + offsets[0].get<uint64_t>();
    const uint64_t end = parsed.data_start + offsets[1].get<uint64_t>();
    const std::string bytes = file.substr(begin, end - begin);
    EXPECT_EQ((*digests)[i].sha256, Sha256Hex(bytes)) << specs[i].name;
    EXPECT_EQ((*digests)[i].crc32c, Crc32c(bytes.data(), bytes.size())) << specs[i].name;
  }
}

TEST(SafetensorsTest, RoundTripIsBitExact) {
  std::vector<Tensor> owned;
  std::vector<NamedTensor> tensors;
  int i = 0;
  for (DType dtype :
       {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{129}, Shape{2, 3, 5}}) {
      owned.push_back(RandomBits(shape, dtype, 7 * i + 1));
      tensors.push_back({absl::StrCat("t", i++), owned.back().view()});
    }
  }
  const std::string path = TempPath("round_trip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE(reader->metadata().empty());
  ASSERT_EQ(reader->entries().size(), tensors.size());
  for (const NamedTensor& t : tensors) {
    auto back = reader->ReadTensor(t.name);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->dtype(), t.view.dtype);
    EXPECT_EQ(back->shape(), t.view.shape);
    EXPECT_EQ(Bytes(back->view()), Bytes(t.view)) << t.name;
    // Read() into a caller's buffer as well.
    Tensor dst = Tensor::Zeros(t.view.shape, t.view.dtype);
    ASSERT_TRUE(reader->Read(t.name, dst.view()).ok());
    EXPECT_EQ(Bytes(dst.view()), Bytes(t.view));
  }
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  Tensor a = testing::RandomTensor({4, 3}, DType::kF32, 1);
  const std::string path = TempPath("bad_input.safetensors");
  auto write = [&](std::vector<NamedTensor> tensors, SafetensorsMetadata meta = {}) {
    return WriteSafetensors(path, tensors, meta);
  };
  absl::Status s = write({{"x", a.view()}, {"x", a.view()}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("duplicate tensor name 'x'"), std::string::npos) << s;
  EXPECT_EQ(write({{"", a.view()}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(write({{"__metadata__", a.view()}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(write({{"bad\xFF", a.view()}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(write({{"overlong\xC0\xAF", a.view()}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(write({{"x", a.view()}}, {{"k", "v\xED\xA0\x80"}}).code(),
            absl::StatusCode::kInvalidArgument);
  TensorView strided = a.view();
  strided.shape = {2, 3};
  strided.strides = {6, 1};
  s = write({{"strided", strided}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'strided'"), std::string::npos) << s;
  TensorView gpu = a.view();
  gpu.device = Device::Cuda(0);
  s = write({{"gpu", gpu}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("copy it to the host"), std::string::npos) << s;
  // File-system errors name the path.
  const std::string missing = TempPath("no_such_dir/x.safetensors");
  s = WriteSafetensors(missing, {{"x", a.view()}});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find(missing), std::string::npos) << s;
}

struct Corruption {
  std::string label;
  std::string bytes;
  absl::StatusCode code;
  std::string message;  // Expected substring.
};

TEST(SafetensorsTest, MalformedFilesGiveClearErrors) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\x11');
  const std::vector<Corruption> cases = {
      {"empty", "", absl::StatusCode::kDataLoss, "too short for the 8-byte header length"},
      {"short", "abc", absl::StatusCode::kDataLoss, "too short"},
      {"length_past_end",
       [] {
         std::string s;
         PutLE(&s, 1000, 8);
         return s + "{}";
       }(),
       absl::StatusCode::kDataLoss, "header length 1000 runs past the end of the file"},
      {"garbage_magic", "PK\x03\x04 not a safetensors file at all", absl::StatusCode::kDataLoss,
       "runs past the end"},
      {"not_json", SpecFile("{\"a\": [1, 2", ""), absl::StatusCode::kDataLoss, "not valid JSON"},
      {"not_utf8", SpecFile("{\"a\xFF\":{}}", ""), absl::StatusCode::kDataLoss, "not valid JSON"},
      {"not_object", SpecFile("[1,2]", ""), absl::StatusCode::kDataLoss,
       "header is not a JSON object"},
      {"unknown_dtype", SpecFile(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", eight),
       absl::StatusCode::kDataLoss, "unknown safetensors dtype 'Q7'"},
      {"unsupported_dtype",
       SpecFile(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", eight),
       absl::StatusCode::kUnimplemented, "F64 is not supported"},
      {"negative_dim",
       SpecFile(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       absl::StatusCode::kDataLoss, "non-negative integer"},
      {"missing_field", SpecFile(R"({"a":{"dtype":"F32","shape":[2]}})", eight),
       absl::StatusCode::kDataLoss, "needs \"dtype\", \"shape\" and \"data_offsets\""},
      {"size_mismatch",
       SpecFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       absl::StatusCode::kDataLoss, "do not hold 12 bytes"},
      {"bad_offsets", SpecFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight),
       absl::StatusCode::kDataLoss, "\"data_offsets\" is not [begin, end]"},
      {"out_of_range",
       SpecFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", eight),
       absl::StatusCode::kDataLoss, "beyond the data region of 8 bytes"},
      {"overlap",
       SpecFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                eight),
       absl::StatusCode::kDataLoss, "overlaps"},
      {"gap", SpecFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       absl::StatusCode::kDataLoss, "gap in the data region before tensor 'a'"},
      {"trailing_bytes", SpecFile("{" + ok_entry + "}", eight + "xx"), absl::StatusCode::kDataLoss,
       "data region has 10 bytes but the tensors cover 8"},
      {"duplicate_name",
       SpecFile("{" + ok_entry + "," + R"("a":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                eight),
       absl::StatusCode::kDataLoss, "the key 'a' twice"},
      {"duplicate_field",
       SpecFile(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight),
       absl::StatusCode::kDataLoss, "the key 'dtype' twice"},
      {"metadata_not_string", SpecFile("{" + ok_entry + R"(,"__metadata__":{"step":3}})", eight),
       absl::StatusCode::kDataLoss, "__metadata__ value of 'step' is not a string"},
  };
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = TempPath("corrupt_" + c.label);
    WriteBytes(path, c.bytes);
    auto reader = SafetensorsReader::Open(path);
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.status().code(), c.code) << reader.status();
    EXPECT_NE(reader.status().message().find(path), std::string::npos) << reader.status();
    EXPECT_NE(reader.status().message().find(c.message), std::string::npos) << reader.status();
  }
}

TEST(SafetensorsTest, TruncatedWriterOutputIsRejected) {
  Tensor a = RandomBits({5, 7}, DType::kF32, 3);
  Tensor b = RandomBits({9}, DType::kBF16, 4);
  auto bytes = SerializeSafetensors({{"a", a.view()}, {"b", b.view()}});
  ASSERT_TRUE(bytes.ok());
  for (size_t keep : {size_t{0}, size_t{5}, size_t{8}, size_t{20}, bytes->size() - 1}) {
    SCOPED_TRACE(keep);
    const std::string path = TempPath("truncated");
    WriteBytes(path, bytes->substr(0, keep));
    auto reader = SafetensorsReader::Open(path);
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss) << reader.status();
  }
}

TEST(SafetensorsTest, PaddedHeaderAndEmptyFileOfTensors) {
  // A header padded with spaces (as the writer does) and a file holding no tensors at all.
  const std::string path = TempPath("padded");
  WriteBytes(path, SpecFile("{}      ", ""));
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE(reader->entries().empty());
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE(reader->entries().empty());
}

TEST(SafetensorsTest, ReadErrors) {
  Tensor a = RandomBits({4, 3}, DType::kF32, 5);
  const std::string path = TempPath("read_errors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", a.view()}}).ok());
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->Read("zzz", a.view()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reader->ReadTensor("zzz").status().code(), absl::StatusCode::kNotFound);
  Tensor wrong_shape = Tensor::Zeros({3, 4}, DType::kF32);
  absl::Status s = reader->Read("a", wrong_shape.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'a'"), std::string::npos) << s;
  Tensor wrong_dtype = Tensor::Zeros({4, 3}, DType::kI32);
  EXPECT_EQ(reader->Read("a", wrong_dtype.view()).code(), absl::StatusCode::kInvalidArgument);

  // Truncated after opening: the read reports data loss instead of returning garbage.
  ASSERT_EQ(::truncate(path.c_str(), 20), 0);
  Tensor dst = Tensor::Zeros({4, 3}, DType::kF32);
  s = reader->Read("a", dst.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;

  auto missing = SafetensorsReader::Open(TempPath("does_not_exist"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

// ReadMany over more than the few MiB from which worker threads check the digests behind the
// reads: a tensor of several read pieces among small ones, read bit for bit in any request
// order; a flipped byte in a later piece is caught, and of two bad tensors the first in the file
// is named; all of it checking SHA-256s and checking CRC32Cs.
TEST(SafetensorsTest, ReadManyChecksDigestsBehindTheReads) {
  std::vector<Tensor> owned;
  owned.push_back(RandomBits({7}, DType::kF32, 11));
  owned.push_back(RandomBits({5, 250007}, DType::kF32, 12));  // 5 MB: two 4 MiB read pieces.
  owned.push_back(RandomBits({5, 9}, DType::kBF16, 13));
  owned.push_back(RandomBits({1000}, DType::kI64, 14));
  const std::vector<std::string> names = {"small", "big", "bf16", "ids"};
  std::vector<NamedTensor> tensors;
  for (size_t i = 0; i < owned.size(); ++i) tensors.push_back({names[i], owned[i].view()});
  const std::string path = TempPath("read_many.safetensors");
  auto digests = WriteSafetensorsWithDigests(path, tensors);
  ASSERT_TRUE(digests.ok()) << digests.status();
  for (size_t i = 0; i < owned.size(); ++i) {
    const std::string bytes = Bytes(owned[i].view());
    ASSERT_EQ((*digests)[i].sha256, Sha256Hex(bytes)) << names[i];
    ASSERT_EQ((*digests)[i].crc32c, Crc32c(bytes.data(), bytes.size())) << names[i];
  }
  auto read = [&](std::vector<Tensor>* dst, bool crc32c, std::vector<size_t> which) {
    auto reader = SafetensorsReader::Open(path);
    EXPECT_TRUE(reader.ok()) << reader.status();
    if (!reader.ok()) return reader.status();
    for (size_t i = 0; i < owned.size(); ++i) {
      EXPECT_TRUE((crc32c ? reader->ExpectCrc32c(names[i], (*digests)[i].crc32c)
                          : reader->ExpectSha256(names[i], (*digests)[i].sha256))
                      .ok());
    }
    dst->clear();
    std::vector<SafetensorsReader::ReadRequest> requests;
    for (size_t i : which) {
      dst->push_back(Tensor::Zeros(owned[i].shape(), owned[i].dtype()));
      requests.push_back({names[i], dst->back().view()});
    }
    return reader->ReadMany(requests);
  };
  const std::vector<size_t> all = {3, 1, 0, 2};  // Not the file's order.
  for (bool crc32c : {false, true}) {
    std::vector<Tensor> back;
    ASSERT_TRUE(read(&back, crc32c, all).ok());
    EXPECT_EQ(Bytes(back[0].view()), Bytes(owned[3].view()));
    EXPECT_EQ(Bytes(back[1].view()), Bytes(owned[1].view()));
    EXPECT_EQ(Bytes(back[2].view()), Bytes(owned[0].view()));
    EXPECT_EQ(Bytes(back[3].view()), Bytes(owned[2].view()));
  }

  // A bad request is refused before anything is read.
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok());
  Tensor untouched = Tensor::Zeros({7}, DType::kF32);
  Tensor wrong = Tensor::Zeros({9}, DType::kF32);
  EXPECT_EQ(reader->ReadMany({{"small", untouched.view()}, {"big", wrong.view()}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Bytes(untouched.view()), std::string(28, '\0'));

  // Flip a byte in the last piece of "big", then one in "ids" (after it in the file).
  std::string file = ReadBytes(path);
  const size_t big_end = file.size() - owned[3].nbytes() - owned[2].nbytes();
  file[big_end - 5] ^= 1;
  WriteBytes(path, file);
  std::vector<Tensor> back;
  for (bool crc32c : {false, true}) {
    const std::string want =
        crc32c ? "tensor 'big' fails its CRC32C check" : "tensor 'big' fails its SHA-256 check";
    const absl::Status s = read(&back, crc32c, all);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
  }
  file[file.size() - 1] ^= 1;
  WriteBytes(path, file);
  for (bool crc32c : {false, true}) {
    const std::string check = crc32c ? "CRC32C" : "SHA-256";
    const absl::Status s = read(&back, crc32c, all);
    EXPECT_NE(s.message().find("tensor 'big' fails its " + check + " check"), std::string::npos)
        << s;
  }
}

// Below the few MiB of the workers the digests are computed after the reads: a flipped byte is
// caught checking SHA-256s and CRC32Cs alike.
TEST(SafetensorsTest, ReadManyChecksSmallTensorsAfterTheReads) {
  const Tensor a = RandomBits({7, 3}, DType::kF32, 15);
  const Tensor b = RandomBits({1000}, DType::kI64, 16);
  const std::string path = TempPath("read_small.safetensors");
  auto digests = WriteSafetensorsWithDigests(path, {{"a", a.view()}, {"b", b.view()}});
  ASSERT_TRUE(digests.ok()) << digests.status();
  std::string file = ReadBytes(path);
  file[file.size() - 3] ^= 4;  // In "b".
  WriteBytes(path, file);
  for (bool crc32c : {false, true}) {
    auto reader = SafetensorsReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (size_t i = 0; i < 2; ++i) {
      const std::string name = i == 0 ? "a" : "b";
      ASSERT_TRUE((crc32c ? reader->ExpectCrc32c(name, (*digests)[i].crc32c)
                          : reader->ExpectSha256(name, (*digests)[i].sha256))
                      .ok());
    }
    Tensor ra = Tensor::Zeros({7, 3}, DType::kF32);
    Tensor rb = Tensor::Zeros({1000}, DType::kI64);
    EXPECT_TRUE(reader->Read("a", ra.view()).ok());
    EXPECT_EQ(Bytes(ra.view()), Bytes(a.view()));
    const absl::Status s = reader->ReadMany({{"a", ra.view()}, {"b", rb.view()}});
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    const std::string check = crc32c ? "CRC32C" : "SHA-256";
    EXPECT_NE(s.message().find("tensor 'b' fails its " + check + " check"), std::string::npos) << s;
    // A CRC32C for a tensor the file does not have.
    EXPECT_EQ(reader->ExpectCrc32c("no such tensor", 0).code(), absl::StatusCode::kNotFound);
  }
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt
