#include "data/preprocessing/input_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/fields.h"
#include "core/status.h"
#include "data/indexed/file_util.h"

namespace mt {
namespace data {
namespace {

constexpr size_t kFileBufferBytes = 1 << 20;

bool IsBlank(absl::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\v' && c != '\f') return false;
  }
  return true;
}

// A line without its "\n" and then without a trailing "\r".
absl::string_view LineContent(absl::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

absl::string_view InputFormatName(InputFormat format) {
  return EnumName<InputFormat>(format, kInputFormatNames);
}

absl::StatusOr<std::unique_ptr<InputReader>> InputReader::Open(std::vector<std::string> paths,
                                                               InputFormat format,
                                                               std::string document_separator,
                                                               int64_t chunk_bytes) {
  if (paths.empty()) return absl::InvalidArgumentError("no input files");
  if (chunk_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_bytes must be >= 1, got ", chunk_bytes));
  }
  int64_t total = 0;
  for (const std::string& path : paths) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return ErrnoStatus(errno, "cannot open input", path);
    struct stat st;
    if (::fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
      total = -1;
    } else if (total >= 0) {
      total += st.st_size;
    }
    std::fclose(f);
  }
  return std::unique_ptr<InputReader>(
      new InputReader(std::move(paths), format, std::move(document_separator), chunk_bytes, total));
}

InputReader::InputReader(std::vector<std::string> paths, InputFormat format, std::string separator,
                         int64_t chunk_bytes, int64_t total_bytes)
    : paths_(std::move(paths)),
      format_(format),
      separator_(std::move(separator)),
      chunk_bytes_(chunk_bytes),
      total_bytes_(total_bytes) {}

InputReader::~InputReader() {
  CloseFile();
  std::free(line_);
}

void InputReader::CloseFile() {
  if (current_ != nullptr) std::fclose(current_);
  current_ = nullptr;
}

absl::StatusOr<bool> InputReader::NextFile() {
  CloseFile();
  if (file_ + 1 >= static_cast<int64_t>(paths_.size())) {
    file_ = static_cast<int64_t>(paths_.size());
    return false;
  }
  ++file_;
  line_no_ = 0;
  const std::string& path = paths_[file_];
  current_ = std::fopen(path.c_str(), "rb");
  if (current_ == nullptr) return ErrnoStatus(errno, "cannot open input", path);
  std::setvbuf(current_, nullptr, _IOFBF, kFileBufferBytes);
  return true;
}

absl::StatusOr<bool> InputReader::ReadLine() {
  if (current_ == nullptr) return false;
  errno = 0;
  const ssize_t n = ::getline(&line_, &line_capacity_, current_);
  if (n < 0) {
    if (std::ferror(current_)) {
      const int err = errno;
      return absl::DataLossError(
          absl::StrCat("error reading ", paths_[file_], ": ", std::strerror(err)));
    }
    return false;
  }
  line_size_ = static_cast<size_t>(n);
  ++line_no_;
  return true;
}

absl::StatusOr<bool> InputReader::NextRecord(InputChunk* chunk) {
  bool in_document = false;
  InputRecord record;
  for (;;) {
    ASSIGN_OR_RETURN(bool got_line, ReadLine());
    if (!got_line) {
      if (in_document) break;  // The document ends with its file.
      ASSIGN_OR_RETURN(bool more, NextFile());
      if (!more) return false;
      continue;
    }
    const absl::string_view line(line_, line_size_);
    chunk->input_bytes += static_cast<int64_t>(line.size());
    bytes_read_ += static_cast<int64_t>(line.size());
    if (format_ == InputFormat::kJsonl) {
      if (IsBlank(line)) continue;
      record.offset = chunk->data.size();
      record.file = static_cast<int32_t>(file_);
      record.line = line_no_;
      chunk->data.append(line.data(), line.size() - (line.back() == '\n' ? 1 : 0));
      break;
    }
    if (LineContent(line) == separator_) {
      if (in_document) break;
      continue;
    }
    if (!in_document) {
      in_document = true;
      record.offset = chunk->data.size();
      record.file = static_cast<int32_t>(file_);
      record.line = line_no_;
    }
    chunk->data.append(line.data(), line.size());
  }
  if (format_ == InputFormat::kText) {
    std::string& d = chunk->data;
    if (d.size() > record.offset && d.back() == '\n') {
      d.pop_back();
      if (d.size() > record.offset && d.back() == '\r') d.pop_back();
    }
  }
  record.size = chunk->data.size() - record.offset;
  chunk->records.push_back(record);
  return true;
}

absl::StatusOr<bool> InputReader::Next(InputChunk* chunk) {
  chunk->Clear();
  while (static_cast<int64_t>(chunk->data.size()) < chunk_bytes_) {
    ASSIGN_OR_RETURN(bool got, NextRecord(chunk));
    if (!got) break;
  }
  return !chunk->records.empty();
}

}  // namespace data
}  // namespace mt
