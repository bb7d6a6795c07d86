// The event file's pieces against values worked out by hand: the mask of CRC32C (core/crc32c.h,
// tested in core/crc32c_test.cc), an Event's bytes, the record framing of a written file, and
// the failures (an unwritable directory, a write past a file-size limit). The decoding by an
// independent reader is tensorboard_decode_test's.
#include "train/tensorboard.h"

#include <signal.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mt {
namespace train {
namespace {

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint64_t LittleEndian(absl::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = bytes.size(); i-- > 0;) v = v << 8 | static_cast<unsigned char>(bytes[i]);
  return v;
}

TEST(MaskedCrc32cTest, Mask) {
  // 0xE3069283 rotated right by 15: (crc >> 15) = 0x0001C60D, (crc << 17) keeps the low 15 bits
  // 0x1283 as 0x25060000; together 0x2507C60D, plus 0xA282EAD8 = 0xC78AB0E5 (no carry out).
  EXPECT_EQ(tfevents::MaskCrc32c(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(tfevents::MaskedCrc32c("123456789", 9), 0xC78AB0E5u);
  // The addition wraps: 0 rotates to 0, and 0xFFFFFFFF to itself, plus the constant mod 2^32.
  EXPECT_EQ(tfevents::MaskCrc32c(0), 0xA282EAD8u);
  EXPECT_EQ(tfevents::MaskCrc32c(0xFFFFFFFFu), 0xA282EAD7u);
}

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

TEST(EncodeTest, ScalarEventByHand) {
  // wall_time 1700000000.25 = 0x6553F100.4 (hex) = 1.954FC401 (hex) x 2^30: exponent 1023 + 30 =
  // 0x41D, mantissa 0x954FC401 followed by five zero nibbles: the double 0x41D954FC40100000.
  // step 300 = 0b10_0101100: varint 0xAC (low 7 bits, continuation bit), 0x02.
  // 2.5f = 1.25 x 2^1: exponent 127 + 1 = 0x80, mantissa 0x200000: the float 0x40200000.
  const std::string value = Bytes({0x0A, 7}) + "lm loss" +          // field 1 (tag), wire type 2
                            Bytes({0x15, 0x00, 0x00, 0x20, 0x40});  // field 2, wire type 5
  ASSERT_EQ(value.size(), 14u);
  const std::string summary = Bytes({0x0A, 14}) + value;  // field 1 (value), wire type 2
  const std::string event =
      Bytes({0x09, 0x00, 0x00, 0x10, 0x40, 0xFC, 0x54, 0xD9, 0x41}) +  // field 1, wire type 1
      Bytes({0x10, 0xAC, 0x02}) +                                      // field 2, wire type 0
      Bytes({0x2A, 16}) + summary;                                     // field 5, wire type 2
  EXPECT_EQ(tfevents::EncodeScalarEvent(1700000000.25, 300, "lm loss", 2.5f), event);
}

TEST(EncodeTest, FileVersionEventByHand) {
  // wall_time 1.5 = 1.1 (binary) x 2^0: the double 0x3FF8000000000000; field 3 (file_version),
  // wire type 2: key 0x1A, length 13.
  const std::string event = Bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x1A, 13}) + "brain.Event:2";
  EXPECT_EQ(tfevents::EncodeFileVersionEvent(1.5), event);
}

TEST(EncodeTest, NegativeStepTakesTenBytes) {
  // -1 as uint64 is 64 one bits: nine bytes of 7 bits with the continuation bit, then the last 1.
  const std::string event = tfevents::EncodeScalarEvent(0, -1, "t", 0);
  EXPECT_EQ(event.substr(9, 11),
            Bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
}

TEST(EncodeTest, FrameRecord) {
  const std::string framed = tfevents::FrameRecord("123456789");
  ASSERT_EQ(framed.size(), 8u + 4 + 9 + 4);
  EXPECT_EQ(framed.substr(0, 8), Bytes({9, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(LittleEndian(framed.substr(8, 4)), tfevents::MaskedCrc32c(framed.data(), 8));
  EXPECT_EQ(framed.substr(12, 9), "123456789");
  EXPECT_EQ(LittleEndian(framed.substr(21, 4)), 0xC78AB0E5u);  // Mask above
}

TEST(EncodeTest, FileName) {
  EXPECT_EQ(tfevents::EventFileName(1700000000, "node7"), "events.out.tfevents.1700000000.node7");
  EXPECT_EQ(tfevents::EventFileName(42, "h"), "events.out.tfevents.0000000042.h");
}

// The records of an event file, each checked against its framing.
std::vector<std::string> ReadRecords(const std::string& path) {
  const std::string file = ReadAll(path);
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < file.size()) {
    EXPECT_GE(file.size() - pos, 12u) << "truncated header at " << pos;
    if (file.size() - pos < 12) break;
    const uint64_t n = LittleEndian(absl::string_view(file).substr(pos, 8));
    EXPECT_EQ(LittleEndian(absl::string_view(file).substr(pos + 8, 4)),
              tfevents::MaskedCrc32c(file.data() + pos, 8));
    EXPECT_GE(file.size() - pos - 12, n + 4) << "truncated record at " << pos;
    if (file.size() - pos - 12 < n + 4) break;
    const std::string data = file.substr(pos + 12, n);
    EXPECT_EQ(LittleEndian(absl::string_view(file).substr(pos + 12 + n, 4)),
              tfevents::MaskedCrc32c(data.data(), n));
    records.push_back(data);
    pos += 12 + n + 4;
  }
  return records;
}

TEST(EventFileWriterTest, WritesFramedRecords) {
  const std::string dir = TempDir("runs/a/b");
  const double before = static_cast<double>(std::time(nullptr));
  auto w = EventFileWriter::Open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string path = (*w)->path();
  const std::string name = path.substr(path.rfind('/') + 1);
  EXPECT_EQ(path.substr(0, dir.size() + 1), dir + "/");
  EXPECT_TRUE(absl::StartsWith(name, "events.out.tfevents.")) << name;
  // Open flushed the first record.
  EXPECT_EQ(ReadRecords(path).size(), 1u);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Scalar {
    std::string tag;
    float value;
    int64_t step;
  };
  const std::vector<Scalar> scalars = {{"lm loss", 10.5f, 1},
                                       {"lm loss vs samples", 10.5f, 1 << 20},
                                       {"grad-norm", nan, 2},
                                       {"loss-scale", inf, 3},
                                       {"", -0.0f, 0}};
  for (const Scalar& s : scalars) ASSERT_TRUE((*w)->AddScalar(s.tag, s.value, s.step).ok());
  ASSERT_TRUE((*w)->Flush().ok());
  w->reset();

  const std::vector<std::string> records = ReadRecords(path);
  ASSERT_EQ(records.size(), 1 + scalars.size());
  // The first: wall time (now), file_version. The wall time is the 8 bytes after the key 0x09.
  ASSERT_EQ(records[0].size(), 24u);
  double wall_time;
  std::memcpy(&wall_time, records[0].data() + 1, 8);
  EXPECT_GE(wall_time, before);
  EXPECT_LE(wall_time, static_cast<double>(std::time(nullptr)) + 1);
  EXPECT_EQ(records[0], tfevents::EncodeFileVersionEvent(wall_time));
  for (size_t i = 0; i < scalars.size(); ++i) {
    const std::string& r = records[i + 1];
    ASSERT_GT(r.size(), 9u);
    std::memcpy(&wall_time, r.data() + 1, 8);
    EXPECT_EQ(r, tfevents::EncodeScalarEvent(wall_time, scalars[i].step, scalars[i].tag,
                                             scalars[i].value))
        << scalars[i].tag;
  }
}

TEST(EventFileWriterTest, TwoWritersInOneDirectoryGetTwoFiles) {
  const std::string dir = TempDir("two");
  auto a = EventFileWriter::Open(dir);
  auto b = EventFileWriter::Open(dir + "/");
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_NE((*a)->path(), (*b)->path());
  ASSERT_TRUE((*a)->AddScalar("x", 1, 1).ok());
  ASSERT_TRUE((*b)->AddScalar("x", 2, 1).ok());
  ASSERT_TRUE((*a)->Flush().ok() && (*b)->Flush().ok());
  EXPECT_EQ(ReadRecords((*a)->path()).size(), 2u);
  EXPECT_EQ(ReadRecords((*b)->path()).size(), 2u);
}

TEST(EventFileWriterTest, UncreatableDirectoryIsNamed) {
  const std::string file = TempDir("plain_file");
  std::ofstream(file) << "x";
  const std::string dir = file + "/logs";
  auto w = EventFileWriter::Open(dir);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(dir), std::string::npos) << w.status();
}

// Writes beyond RLIMIT_FSIZE fail with EFBIG (SIGXFSZ ignored), as a full disk fails with ENOSPC.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit lower = old_;
    lower.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lower);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_;
  sighandler_t old_handler_;
};

TEST(EventFileWriterTest, FailedWriteIsDataLossAndSticks) {
  const std::string dir = TempDir("limited");
  std::string path;
  {
    FileSizeLimit limit(100);  // the first record (40 bytes) fits, the scalars do not
    auto w = EventFileWriter::Open(dir);
    ASSERT_TRUE(w.ok()) << w.status();
    path = (*w)->path();
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE((*w)->AddScalar("lm loss", 1, step).ok());  // buffered
    }
    const absl::Status s = (*w)->Flush();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
    EXPECT_NE(s.message().find("File too large"), std::string::npos) << s;
    // Refused from now on: behind a partial record, a later one could not be found.
    EXPECT_EQ((*w)->AddScalar("lm loss", 1, 3), s);
    EXPECT_EQ((*w)->Flush(), s);
  }
  const std::string file = ReadAll(path);
  EXPECT_EQ(file.size(), 100u);
}

TEST(EventFileWriterTest, FailedFirstRecordFailsOpen) {
  const std::string dir = TempDir("limited_open");
  FileSizeLimit limit(10);
  auto w = EventFileWriter::Open(dir);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(w.status().message().find(dir + "/events.out.tfevents."), std::string::npos)
      << w.status();
}

}  // namespace
}  // namespace train
}  // namespace mt
