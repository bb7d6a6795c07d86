// The training metrics as JSON lines (one object per log line, keys as the log line's fields,
// e.g. "lm_loss"), appended to a file that stays open for the run; each line is flushed as it is
// written, and a line that cannot be written is an error, not a silent gap in the record.
#ifndef MT_TRAIN_METRICS_LOG_H_
#define MT_TRAIN_METRICS_LOG_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"  // json.hpp costs seconds per compile: only where lines are built

namespace mt {
namespace train {

class JsonlWriter {
 public:
  // Opens `path` for appending (created if missing). An errno-derived status naming the path
  // (NotFound for a missing directory, PermissionDenied, ...) if it cannot be opened.
  static absl::StatusOr<std::unique_ptr<JsonlWriter>> Open(const std::string& path);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // Appends `line.dump()` and a newline, and flushes. DataLoss naming the path and the reason
  // (a full disk: ENOSPC) if the write or the flush fails.
  absl::Status Write(const nlohmann::json& line);

 private:
  JsonlWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_METRICS_LOG_H_
