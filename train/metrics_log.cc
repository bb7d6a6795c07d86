#include "train/metrics_log.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace train {

absl::StatusOr<std::unique_ptr<JsonlWriter>> JsonlWriter::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat("cannot open the metrics log ",
                                                                   path, ": ", std::strerror(err)));
  }
  return std::unique_ptr<JsonlWriter>(new JsonlWriter(path, f));
}

JsonlWriter::~JsonlWriter() { std::fclose(file_); }

absl::Status JsonlWriter::Write(const nlohmann::json& line) {
  const std::string text = line.dump() + "\n";
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    const int err = errno;
    std::clearerr(file_);
    return absl::DataLossError(absl::StrCat("cannot write the metrics log ", path_, ": ",
                                            err != 0 ? std::strerror(err) : "short write"));
  }
  return absl::OkStatus();
}

}  // namespace train
}  // namespace mt
