#include "train/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/crc32c.h"
#include "core/file_system.h"
#include "core/status.h"

namespace mt {
namespace train {
namespace tfevents {
namespace {

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void PutKey(std::string* out, int field, WireType type) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | type);
}

void PutLengthDelimited(std::string* out, int field, absl::string_view bytes) {
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

void PutWallTime(std::string* event, double wall_time) {
  uint64_t bits;
  std::memcpy(&bits, &wall_time, sizeof(bits));
  PutKey(event, 1, kFixed64);
  PutLittleEndian(event, bits, 8);
}

std::string Hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  std::string host(name);
  for (char& c : host) {
    if (c == '/') c = '_';  // a file name, not a path
  }
  return host;
}

}  // namespace

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint32_t MaskedCrc32c(const void* data, size_t n) { return MaskCrc32c(Crc32c(data, n)); }

std::string FrameRecord(absl::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  PutLittleEndian(&out, data.size(), 8);
  PutLittleEndian(&out, MaskedCrc32c(out.data(), 8), 4);
  out.append(data.data(), data.size());
  PutLittleEndian(&out, MaskedCrc32c(data.data(), data.size()), 4);
  return out;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string event;
  PutWallTime(&event, wall_time);
  PutLengthDelimited(&event, 3, "brain.Event:2");
  return event;
}

std::string EncodeScalarEvent(double wall_time, int64_t step, absl::string_view tag, float value) {
  uint32_t value_bits;
  std::memcpy(&value_bits, &value, sizeof(value_bits));
  std::string summary_value;
  PutLengthDelimited(&summary_value, 1, tag);
  PutKey(&summary_value, 2, kFixed32);
  PutLittleEndian(&summary_value, value_bits, 4);
  std::string summary;
  PutLengthDelimited(&summary, 1, summary_value);

  std::string event;
  PutWallTime(&event, wall_time);
  PutKey(&event, 2, kVarint);
  PutVarint(&event, static_cast<uint64_t>(step));  // a negative int64 takes ten bytes
  PutLengthDelimited(&event, 5, summary);
  return event;
}

std::string EventFileName(int64_t unix_seconds, absl::string_view hostname) {
  return absl::StrFormat("events.out.tfevents.%010d.%s", unix_seconds, hostname);
}

}  // namespace tfevents

namespace {

double SecondsSinceEpoch(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

}  // namespace

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Open(const std::string& dir) {
  RETURN_IF_ERROR(DefaultFileSystem().CreateDirectories(dir));
  const absl::Time now = absl::Now();
  const std::string base =
      absl::StrCat(absl::StripSuffix(dir, "/"), "/",
                   tfevents::EventFileName(absl::ToUnixSeconds(now), tfevents::Hostname()));
  // "x": created here or not at all, so that a file of another writer (or of a run restarted
  // within the same second) is never truncated.
  std::string path = base;
  std::FILE* f = nullptr;
  for (int suffix = 1; (f = std::fopen(path.c_str(), "wbx")) == nullptr; ++suffix) {
    const int err = errno;
    if (err != EEXIST || suffix > 100) {
      return ErrnoStatus(err, "cannot create the event file", path);
    }
    path = absl::StrCat(base, ".", suffix);
  }
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, f));
  RETURN_IF_ERROR(writer->WriteRecord(tfevents::EncodeFileVersionEvent(SecondsSinceEpoch(now))));
  RETURN_IF_ERROR(writer->Flush());
  return writer;
}

EventFileWriter::~EventFileWriter() { std::fclose(file_); }

absl::Status EventFileWriter::AddScalar(absl::string_view tag, double value, int64_t step) {
  return WriteRecord(tfevents::EncodeScalarEvent(SecondsSinceEpoch(absl::Now()), step, tag,
                                                 static_cast<float>(value)));
}

absl::Status EventFileWriter::Flush() {
  if (!error_.ok()) return error_;
  errno = 0;
  if (std::fflush(file_) != 0) return Failed(errno);
  return absl::OkStatus();
}

absl::Status EventFileWriter::WriteRecord(absl::string_view data) {
  if (!error_.ok()) return error_;
  const std::string record = tfevents::FrameRecord(data);
  errno = 0;
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) return Failed(errno);
  return absl::OkStatus();
}

absl::Status EventFileWriter::Failed(int err) {
  std::clearerr(file_);
  error_ = absl::DataLossError(absl::StrCat("cannot write the event file ", path_, ": ",
                                            err != 0 ? std::strerror(err) : "short write"));
  return error_;
}

}  // namespace train
}  // namespace mt
