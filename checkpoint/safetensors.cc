#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/digest_workers.h"
#include "checkpoint/direct_read.h"
#include "checkpoint/direct_write.h"
#include "checkpoint/sha256.h"
#include "checkpoint/utf8.h"
#include "core/alloc.h"
#include "core/crc32c.h"
#include "core/status.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {

// The format is little-endian; so is every machine this project builds for.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

namespace {

using Json = nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";
// The reference implementation refuses larger headers; so do we, to bound memory on bad input.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string Dump(const Json& j) {
  // Inputs are validated UTF-8; `replace` only guarantees that dump() can never throw.
  return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

// Where the writer starts the data region: a multiple of this (the format asks for 8).
constexpr uint64_t kDataAlignment = 4096;

// The 8-byte length, the JSON header and its space padding, for tensors laid out in order.
absl::StatusOr<std::string> BuildHeader(const std::vector<NamedTensor>& tensors,
                                        const SafetensorsMetadata& metadata) {
  Json header = Json::object();
  absl::flat_hash_set<std::string> names;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || !IsValidUtf8(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: invalid tensor name '", t.name,
                                                     "' (names must be non-empty UTF-8 and not \"",
                                                     kMetadataKey, "\")"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: duplicate tensor name '", t.name, "'"));
    }
    if (!InHostMemory(t.view)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", t.name, "' (",
                                                     t.view.DebugString(),
                                                     ") must be on the CPU; copy it to the host"));
    }
    if (!t.view.IsContiguous() || (t.view.data == nullptr && t.view.numel() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", t.name, "' (",
                                                     t.view.DebugString(),
                                                     ") must be contiguous with data"));
    }
    Json shape = Json::array();
    for (int64_t d : t.view.shape) shape.push_back(static_cast<uint64_t>(d));
    const uint64_t nbytes = t.view.nbytes();
    header[t.name] = Json{{"dtype", std::string(SafetensorsDTypeName(t.view.dtype))},
                          {"shape", std::move(shape)},
                          {"data_offsets", Json::array({offset, offset + nbytes})}};
    offset += nbytes;
  }
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) {
      if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("safetensors: metadata entry '", key, "' is not valid UTF-8"));
      }
      meta[key] = value;
    }
    header[kMetadataKey] = std::move(meta);
  }
  // Spaces up to the next multiple of kDataAlignment: the data region starts on a page boundary,
  // so that tensors of whole blocks can be read around the page cache straight into memory.
  std::string json = Dump(header);
  json.append((kDataAlignment - (8 + json.size()) % kDataAlignment) % kDataAlignment, ' ');
  const uint64_t n = json.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);  // Little-endian (static_assert above).
  out += json;
  return out;
}

// Writes a file in large pieces: data of tensors under kGatherBelow bytes (and the header) are
// gathered into one buffer, larger ones go straight from their memory.
class GatheringWriter {
 public:
  explicit GatheringWriter(WritableFile& file) : file_(file) {}

  absl::Status Write(const void* data, size_t n) {
    if (n >= kGatherBelow) {
      RETURN_IF_ERROR(Flush());
      return file_.Append(data, n);
    }
    if (buffer_.size() + n > kBufferBytes) RETURN_IF_ERROR(Flush());
    buffer_.append(static_cast<const char*>(data), n);
    return absl::OkStatus();
  }

  absl::Status Flush() {
    if (buffer_.empty()) return absl::OkStatus();
    const absl::Status s = file_.Append(buffer_.data(), buffer_.size());
    buffer_.clear();
    return s;
  }

 private:
  static constexpr size_t kGatherBelow = size_t{1} << 20;
  static constexpr size_t kBufferBytes = size_t{4} << 20;

  WritableFile& file_;
  std::string buffer_;
};

// The header, then every tensor's bytes, then Close(sync).
absl::Status WriteFileContents(WritableFile& file, const std::string& header,
                               const std::vector<NamedTensor>& tensors, Sync sync) {
  GatheringWriter writer(file);
  RETURN_IF_ERROR(writer.Write(header.data(), header.size()));
  for (const NamedTensor& t : tensors) {
    if (t.view.nbytes() > 0) RETURN_IF_ERROR(writer.Write(t.view.data, t.view.nbytes()));
  }
  RETURN_IF_ERROR(writer.Flush());
  return file.Close(sync);
}

}  // namespace

absl::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU16:
      return "U16";
  }
  LOG(FATAL) << "unknown dtype " << static_cast<int>(dtype);
  return "";
}

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    if (name == SafetensorsDTypeName(d)) return d;
  }
  static const std::set<std::string> kOthers = {"BOOL", "U8",      "I8",      "I16",     "U32",
                                                "U64",  "F64",     "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                                "F4",   "F6_E2M3", "F6_E3M2", "C64"};
  if (kOthers.count(std::string(name)) > 0) {
    return absl::UnimplementedError(
        absl::StrCat("safetensors dtype ", name,
                     " is not supported (supported: F32, BF16, F16, I32, I64, U16)"));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown safetensors dtype '", name, "'"));
}

absl::StatusOr<std::string> SerializeSafetensors(const std::vector<NamedTensor>& tensors,
                                                 const SafetensorsMetadata& metadata) {
  ASSIGN_OR_RETURN(std::string out, BuildHeader(tensors, metadata));
  for (const NamedTensor& t : tensors) {
    out.append(static_cast<const char*>(t.view.data), t.view.nbytes());
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const SafetensorsMetadata& metadata, Sync sync, FileSystem& fs) {
  ASSIGN_OR_RETURN(const std::string header, BuildHeader(tensors, metadata));
  ASSIGN_OR_RETURN(const std::unique_ptr<WritableFile> file, fs.NewWritableFile(path));
  return WriteFileContents(*file, header, tensors, sync);
}

absl::StatusOr<std::vector<TensorDigests>> WriteSafetensorsWithDigests(
    const std::string& path, const std::vector<NamedTensor>& tensors,
    const SafetensorsMetadata& metadata, Sync sync, FileSystem& fs) {
  ASSIGN_OR_RETURN(const std::string header, BuildHeader(tensors, metadata));
  // The workers digest the tensors' memory, which is what the file receives, while it is written:
  // SHA-256 and CRC32C in one pass over each piece. One thread fewer than for reading: the
  // writing thread keeps a core to itself, and hashing has the time of the fsync to catch up.
  std::vector<DigestWorkers::Buffer> buffers;
  std::vector<internal::WritePart> parts = {{header.data(), header.size()}};
  uint64_t total = header.size();
  buffers.reserve(tensors.size());
  for (const NamedTensor& t : tensors) {
    buffers.push_back({t.view.data, t.view.nbytes(), /*sha256=*/true, /*crc32c=*/true});
    parts.push_back({t.view.data, t.view.nbytes()});
    total += t.view.nbytes();
  }
  DigestWorkers workers(std::move(buffers), std::max(1, DigestWorkers::DefaultThreads() - 1));
  workers.MarkAllReady();
  if (total >= kDirectWriteFrom) {
    // Around the page cache where the file system allows it; where the kernel refuses the direct
    // writes (InvalidArgument), the file is written again through the page cache.
    absl::StatusOr<std::unique_ptr<DirectWritableFile>> direct = fs.NewDirectWritableFile(path);
    if (direct.ok()) {
      const absl::Status written = internal::WriteDirect(**direct, parts, sync);
      if (written.ok()) return workers.Finish();
      if (!absl::IsInvalidArgument(written)) return written;
    }
  }
  ASSIGN_OR_RETURN(const std::unique_ptr<WritableFile> file, fs.NewWritableFile(path));
  RETURN_IF_ERROR(WriteFileContents(*file, header, tensors, sync));
  return workers.Finish();
}

// ---------------------------------------------------------------------------------------------
// Reader

namespace {

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

// Parses one tensor's {"dtype", "shape", "data_offsets"} object.
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& path, const std::string& name,
                                            const Json& info) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!info.is_object()) return Corrupt(path, where + ": entry is not a JSON object");
  auto dtype_it = info.find("dtype");
  auto shape_it = info.find("shape");
  auto offsets_it = info.find("data_offsets");
  if (dtype_it == info.end() || shape_it == info.end() || offsets_it == info.end()) {
    return Corrupt(path, where + ": entry needs \"dtype\", \"shape\" and \"data_offsets\"");
  }
  SafetensorsEntry e;
  e.name = name;
  if (!dtype_it->is_string()) return Corrupt(path, where + ": \"dtype\" is not a string");
  auto dtype = ParseSafetensorsDType(dtype_it->get<std::string>());
  if (!dtype.ok()) {
    const std::string message = absl::StrCat(path, ": ", where, ": ", dtype.status().message());
    return absl::IsUnimplemented(dtype.status()) ? absl::UnimplementedError(message)
                                                 : absl::DataLossError(message);
  }
  e.dtype = *dtype;
  if (!shape_it->is_array()) return Corrupt(path, where + ": \"shape\" is not an array");
  // Bound numel * element size well inside uint64 while multiplying.
  constexpr uint64_t kMaxBytes = uint64_t{1} << 62;
  uint64_t nbytes = DTypeSize(e.dtype);
  for (const Json& d : *shape_it) {
    if (!d.is_number_unsigned()) {
      return Corrupt(path, where + ": \"shape\" holds something other than a non-negative integer");
    }
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (v != 0 && nbytes > kMaxBytes / v)) {
      return Corrupt(path, where + ": shape is too large");
    }
    nbytes *= v;
    e.shape.push_back(static_cast<int64_t>(v));
  }
  if (!offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return Corrupt(path, where + ": \"data_offsets\" is not [begin, end] of non-negative integers");
  }
  e.begin = (*offsets_it)[0].get<uint64_t>();
  e.end = (*offsets_it)[1].get<uint64_t>();
  if (e.end < e.begin || e.end - e.begin != nbytes) {
    return Corrupt(path, absl::StrCat(where, ": data_offsets [", e.begin, ", ", e.end,
                                      "] do not hold ", nbytes, " bytes (", ShapeToString(e.shape),
                                      " ", SafetensorsDTypeName(e.dtype), ")"));
  }
  return e;
}

// The header's JSON text, after checking its 8-byte length against the file; *data_start is where
// the tensor data begins and *data_size its length.
absl::StatusOr<std::string> ReadHeaderText(const RandomAccessFile& file, uint64_t* data_start,
                                           uint64_t* data_size) {
  const std::string& path = file.path();
  const uint64_t file_size = file.size();
  if (file_size < 8) {
    return Corrupt(path, absl::StrCat("file has ", file_size,
                                      " bytes, too short for the 8-byte header length "
                                      "(not a safetensors file?)"));
  }
  uint64_t n = 0;
  RETURN_IF_ERROR(file.Read(0, 8, &n));
  if (n > file_size - 8) {
    return Corrupt(path, absl::StrCat("header length ", n, " runs past the end of the file (",
                                      file_size, " bytes; truncated, or not a safetensors file?)"));
  }
  if (n > kMaxHeaderBytes) {
    return Corrupt(path, absl::StrCat("header length ", n, " exceeds the limit of ",
                                      kMaxHeaderBytes, " bytes"));
  }
  std::string text(n, '\0');
  RETURN_IF_ERROR(file.Read(8, n, text.data()));
  *data_start = 8 + n;
  *data_size = file_size - *data_start;
  return text;
}

// The header as a JSON object. Duplicate keys are legal JSON that nlohmann would silently
// collapse; they are caught while parsing.
absl::StatusOr<Json> ParseHeader(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  Json::parser_callback_t on_event = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json header = Json::parse(text, on_event, /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return Corrupt(path, "header is not valid JSON (or not UTF-8)");
  }
  if (!header.is_object()) return Corrupt(path, "header is not a JSON object");
  if (!duplicate.empty()) {
    return Corrupt(path, absl::StrCat("header has the key '", duplicate, "' twice"));
  }
  return header;
}

// The __metadata__ object: string values only.
absl::Status ParseMetadata(const std::string& path, const Json& value, SafetensorsMetadata* out) {
  if (!value.is_object()) return Corrupt(path, "__metadata__ is not a JSON object");
  for (const auto& kv : value.items()) {
    if (!kv.value().is_string()) {
      return Corrupt(path, absl::StrCat("__metadata__ value of '", kv.key(), "' is not a string"));
    }
    (*out)[kv.key()] = kv.value().get<std::string>();
  }
  return absl::OkStatus();
}

// Sorts the entries by their data offsets and checks that they tile the data region exactly: no
// overlap, no gap, nothing after the last.
absl::Status SortAndCheckTiling(const std::string& path, uint64_t data_size,
                                std::vector<SafetensorsEntry>* entries) {
  std::sort(entries->begin(), entries->end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries->size(); ++i) {
    const SafetensorsEntry& e = (*entries)[i];
    if (e.begin < covered) {
      return Corrupt(path, absl::StrCat("tensor '", e.name, "' overlaps tensor '",
                                        (*entries)[i - 1].name, "'"));
    }
    if (e.begin > covered) {
      return Corrupt(path, absl::StrCat("gap in the data region before tensor '", e.name,
                                        "' (bytes ", covered, " to ", e.begin, ")"));
    }
    covered = e.end;
  }
  if (covered != data_size) {
    return Corrupt(path, absl::StrCat("data region has ", data_size,
                                      " bytes but the tensors cover ", covered));
  }
  return absl::OkStatus();
}

// The rest of each span, from (*done)[i], through the page cache in pieces of a few MiB.
absl::Status ReadSpansBuffered(const RandomAccessFile& file,
                               const std::vector<internal::ReadSpan>& spans,
                               const internal::ReadProgress& progress, std::vector<size_t>* done) {
  constexpr size_t kPiece = size_t{4} << 20;
  for (size_t i = 0; i < spans.size(); ++i) {
    const internal::ReadSpan& s = spans[i];
    for (size_t d = (*done)[i]; d < s.size;) {
      const size_t n = std::min(kPiece, s.size - d);
      RETURN_IF_ERROR(file.Read(s.offset + d, n, s.dst + d));
      d += n;
      (*done)[i] = d;
      progress(i, d);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(const std::string& path, FileSystem& fs) {
  SafetensorsReader reader;
  reader.path_ = path;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = fs.NewRandomAccessFile(path);
  if (absl::IsFailedPrecondition(file.status())) return Corrupt(path, "not a regular file");
  if (!file.ok()) return file.status();
  reader.file_ = *std::move(file);
  // Large reads go around the page cache where the file system allows it (else: buffered).
  absl::StatusOr<std::unique_ptr<DirectReadFile>> direct = fs.NewDirectReadFile(path);
  if (direct.ok()) reader.direct_ = *std::move(direct);
  uint64_t data_size = 0;
  ASSIGN_OR_RETURN(const std::string text,
                   ReadHeaderText(*reader.file_, &reader.data_start_, &data_size));
  ASSIGN_OR_RETURN(const Json header, ParseHeader(path, text));
  for (const auto& item : header.items()) {
    if (item.key() == kMetadataKey) {
      RETURN_IF_ERROR(ParseMetadata(path, item.value(), &reader.metadata_));
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(path, item.key(), item.value()));
    if (e.end > data_size) {
      return Corrupt(
          path, absl::StrCat("tensor '", e.name, "' ends at data offset ", e.end,
                             ", beyond the data region of ", data_size, " bytes (truncated?)"));
    }
    reader.entries_.push_back(std::move(e));
  }
  RETURN_IF_ERROR(SortAndCheckTiling(path, data_size, &reader.entries_));
  for (size_t i = 0; i < reader.entries_.size(); ++i) {
    reader.index_.emplace(reader.entries_[i].name, i);
  }
  return reader;
}

const SafetensorsEntry* SafetensorsReader::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

absl::StatusOr<const SafetensorsEntry*> SafetensorsReader::CheckRead(absl::string_view name,
                                                                     const TensorView& dst) const {
  const SafetensorsEntry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
  }
  if (!InHostMemory(dst) || !dst.IsContiguous() || (dst.data == nullptr && dst.numel() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors read of '", name, "': destination ",
                                                   dst.DebugString(),
                                                   " must be a contiguous CPU view"));
  }
  if (dst.dtype != e->dtype || absl::Span<const int64_t>(dst.shape) != e->shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors read of '", name, "': destination is ", dst.DebugString(),
                     ", file holds ", DTypeName(e->dtype), ShapeToString(e->shape)));
  }
  return e;
}

absl::Status SafetensorsReader::Read(absl::string_view name, const TensorView& dst) const {
  return ReadMany({{std::string(name), dst}});
}

absl::Status SafetensorsReader::CheckDigests(const SafetensorsEntry& e, const Expected& expected,
                                             const TensorDigests& actual) const {
  const auto fails = [&](absl::string_view check, absl::string_view got, absl::string_view want) {
    return Corrupt(path_,
                   absl::StrCat("tensor '", e.name, "' fails its ", check, " check (bytes ",
                                data_start_ + e.begin, "..", data_start_ + e.end, " hash to ", got,
                                ", expected ", want, "): the file is corrupt"));
  };
  if (expected.crc32c.has_value() && actual.crc32c != *expected.crc32c) {
    return fails("CRC32C", Crc32cHex(actual.crc32c), Crc32cHex(*expected.crc32c));
  }
  if (!expected.sha256.empty() && actual.sha256 != expected.sha256) {
    return fails("SHA-256", actual.sha256, expected.sha256);
  }
  return absl::OkStatus();
}

absl::Status SafetensorsReader::ReadMany(const std::vector<ReadRequest>& requests,
                                         ReadStats* stats) const {
  struct Item {
    const SafetensorsEntry* entry;
    char* dst;
    const Expected* expected;  // The digests to check, or null.
    size_t buffer;             // Its index among the workers' buffers.
  };
  std::vector<Item> items;
  items.reserve(requests.size());
  for (const ReadRequest& r : requests) {
    ASSIGN_OR_RETURN(const SafetensorsEntry* e, CheckRead(r.name, r.dst));
    auto expected = expected_.find(r.name);
    items.push_back({e, static_cast<char*>(r.dst.data),
                     expected == expected_.end() ? nullptr : &expected->second, 0});
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.entry->begin < b.entry->begin; });
  std::vector<DigestWorkers::Buffer> buffers;
  std::vector<internal::ReadSpan> spans;
  size_t checked_bytes = 0;
  uint64_t total_bytes = 0;
  bool any_sha256 = false;
  for (Item& item : items) {
    const size_t size = item.entry->end - item.entry->begin;
    spans.push_back({data_start_ + item.entry->begin, size, item.dst});
    total_bytes += size;
    if (item.expected == nullptr) continue;
    item.buffer = buffers.size();
    const bool sha256 = !item.expected->sha256.empty();
    buffers.push_back({item.dst, size, sha256, item.expected->crc32c.has_value()});
    any_sha256 = any_sha256 || sha256;
    checked_bytes += size;
  }
  // The workers digest behind the reads, told of each piece read; below a few MiB the threads
  // would cost more than they save, and the digests are computed after reading. SHA-256 needs
  // every core to keep up with a disk; CRC32C, at several GB/s, one.
  constexpr size_t kWorkersFrom = size_t{4} << 20;
  std::optional<DigestWorkers> workers;
  if (checked_bytes >= kWorkersFrom) {
    workers.emplace(buffers, any_sha256 ? DigestWorkers::DefaultThreads() : 1);
  }
  const internal::ReadProgress progress = [&](size_t i, size_t bytes) {
    if (workers.has_value() && items[i].expected != nullptr) {
      workers->MarkReady(items[i].buffer, bytes);
    }
  };
  std::vector<size_t> done(spans.size(), 0);
  ReadStats read_stats;
  if (direct_ != nullptr && total_bytes >= kDirectReadFrom) {
    // InvalidArgument: the kernel refused direct reads; the rest goes through the page cache.
    const absl::Status direct =
        internal::ReadSpansDirect(*direct_, spans, progress, &done, &read_stats.in_place_bytes);
    if (!direct.ok() && !absl::IsInvalidArgument(direct)) return direct;
    for (size_t d : done) read_stats.direct_bytes += d;
  }
  RETURN_IF_ERROR(ReadSpansBuffered(*file_, spans, progress, &done));
  read_stats.buffered_bytes = total_bytes - read_stats.direct_bytes;
  if (stats != nullptr) *stats = read_stats;
  std::vector<TensorDigests> actual;
  if (workers.has_value()) {
    workers->MarkAllReady();
    actual = workers->Finish();
  } else {
    for (const DigestWorkers::Buffer& b : buffers) {
      actual.push_back(Digest(b.data, b.size, b.sha256, b.crc32c));
    }
  }
  for (const Item& item : items) {
    if (item.expected == nullptr) continue;
    RETURN_IF_ERROR(CheckDigests(*item.entry, *item.expected, actual[item.buffer]));
  }
  return absl::OkStatus();
}

absl::Status SafetensorsReader::ExpectSha256(absl::string_view name,
                                             const std::string& sha256_hex) {
  if (Find(name) == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
  }
  if (!IsSha256Hex(sha256_hex)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': '", sha256_hex,
                                                   "' is not a lowercase hex SHA-256 digest"));
  }
  expected_[std::string(name)].sha256 = sha256_hex;
  return absl::OkStatus();
}

absl::Status SafetensorsReader::ExpectCrc32c(absl::string_view name, uint32_t crc32c) {
  if (Find(name) == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
  }
  expected_[std::string(name)].crc32c = crc32c;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> SafetensorsReader::ReadTensor(absl::string_view name) const {
  const SafetensorsEntry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
  }
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(e->shape, e->dtype));
  RETURN_IF_ERROR(Read(name, t.view()));
  return t;
}

}  // namespace checkpoint
}  // namespace mt
