// The training scalars as a TensorBoard event file: what Megatron's SummaryWriter writes for
// add_scalar(tag, value, step), readable by TensorBoard (`tensorboard --logdir DIR`).
//
// The file, DIR/events.out.tfevents.<unix seconds, 10 digits>.<hostname> (TensorBoard reads the
// files whose names contain "tfevents"), is a sequence of TFRecords, each holding one serialized
// Event protobuf message. A record is framed as
//   uint64  length of the data                        (little-endian, as all the integers here)
//   uint32  masked CRC32C of those 8 length bytes
//   bytes   the data
//   uint32  masked CRC32C of the data
// where CRC32C is the CRC-32 with Castagnoli's polynomial (reflected 0x82F63B78, initial value and
// final xor ~0), and mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 in uint32 arithmetic.
//
// The messages, encoded by hand here (a field's key is the varint (number << 3) | wire type):
//   Event          1 wall_time     double, wire type 1 (8 bytes)   seconds since the Unix epoch
//                  2 step          int64, wire type 0 (varint)
//                  3 file_version  string, wire type 2 (varint length, bytes)
//                  5 summary       Summary, wire type 2
//   Summary        1 value         repeated Summary.Value, wire type 2
//   Summary.Value  1 tag           string, wire type 2
//                  2 simple_value  float, wire type 5 (4 bytes)
// The first record is an Event with the wall time and file_version "brain.Event:2"; each scalar is
// then an Event of its own with one Value. Values are float32 (as Megatron logs them): a double
// is rounded to the nearest float, and NaN and infinities are written as they are.
//
// Records are buffered: Flush() makes them visible to a reader (the first record is flushed by
// Open). A write that fails leaves the file possibly ending in a partial record, so the writer then
// refuses every later write with the same error rather than append records behind it.
// tools/tfevents_decode.py reads such a directory back, independently of this code.
#ifndef MT_TRAIN_TENSORBOARD_H_
#define MT_TRAIN_TENSORBOARD_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace train {

class EventFileWriter {
 public:
  // Creates `dir` (mkdir -p) and a new event file in it, named for the current time and this host
  // (with a suffix ".1", ".2", ... if that name is taken: an existing file is never overwritten),
  // and writes and flushes the file_version record. Errno-derived statuses naming the path.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Open(const std::string& dir);
  // Closes the file (flushing it; an error then goes unreported: Flush() first to see it).
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends one Event at `step` with the wall time now and one scalar, `value` as a float.
  // DataLoss naming the path if the write fails, or if an earlier one did.
  absl::Status AddScalar(absl::string_view tag, double value, int64_t step);
  // Writes out the buffered records (fflush). DataLoss naming the path and the reason (a full
  // disk: ENOSPC) if that fails, or if an earlier write did.
  absl::Status Flush();

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteRecord(absl::string_view data);
  absl::Status Failed(int err);

  std::string path_;
  std::FILE* file_;
  absl::Status error_;  // the first failed write's: every later call returns it
};

// The pieces of the format, for tests.
namespace tfevents {

// mask(crc) as above, and the masked CRC32C (core/crc32c.h) of n bytes.
uint32_t MaskCrc32c(uint32_t crc);
uint32_t MaskedCrc32c(const void* data, size_t n);

// `data` framed as one record.
std::string FrameRecord(absl::string_view data);
// The serialized Events: the first record's, and one scalar's.
std::string EncodeFileVersionEvent(double wall_time);
std::string EncodeScalarEvent(double wall_time, int64_t step, absl::string_view tag, float value);
// "events.out.tfevents.<unix_seconds, zero-padded to 10 digits>.<hostname>".
std::string EventFileName(int64_t unix_seconds, absl::string_view hostname);

}  // namespace tfevents
}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_TENSORBOARD_H_
