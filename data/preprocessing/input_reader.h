// Streams documents from input files in bounded memory, in chunks of whole documents, for the
// preprocessing pipeline (preprocess.h). The reader only splits the input into records; parsing
// JSON and tokenising happen on the workers.
//
// Formats:
//   kJsonl  one JSON object per line (Megatron's loose JSON). Each line that is not blank
//           (whitespace only) is one record, passed on unparsed; blank lines are skipped.
//   kText   plain text. A line whose content (without its "\n" and a trailing "\r") equals the
//           document separator ends the current document; the separator line belongs to no
//           document. A document's record is the exact bytes of its lines, except that the line
//           break ("\n" or "\r\n") ending its last line is removed. A document also ends at the
//           end of each file (documents never span files). Separators with no lines between them
//           (or at the start or end of a file) make no document. With the default separator ""
//           a blank line separates documents (paragraphs); the fortunes corpus uses "%".
// Files are read in the order given, one open at a time, line by line (lines of any length; a NUL
// byte is ordinary data). Memory: one chunk of about chunk_bytes plus one document (a document
// longer than chunk_bytes makes a chunk of its own).
//
// Not thread-safe.
#ifndef MT_DATA_PREPROCESSING_INPUT_READER_H_
#define MT_DATA_PREPROCESSING_INPUT_READER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace data {

enum class InputFormat { kJsonl, kText };
inline constexpr std::pair<absl::string_view, InputFormat> kInputFormatNames[] = {
    {"jsonl", InputFormat::kJsonl}, {"text", InputFormat::kText}};
// "jsonl" or "text".
absl::string_view InputFormatName(InputFormat format);

// One record: a JSON line or a text document, with where it starts for error messages.
struct InputRecord {
  size_t offset = 0;  // Into InputChunk::data.
  size_t size = 0;
  int32_t file = 0;  // Index into the reader's paths.
  int64_t line = 0;  // 1-based line of the record's first line in that file.
};

struct InputChunk {
  std::string data;                  // The records' bytes, back to back.
  std::vector<InputRecord> records;  // In input order.
  int64_t input_bytes = 0;           // Input bytes consumed for this chunk (with separators).

  absl::string_view text(const InputRecord& r) const {
    return absl::string_view(data).substr(r.offset, r.size);
  }
  void Clear() {
    data.clear();
    records.clear();
    input_bytes = 0;
  }
};

class InputReader {
 public:
  // Checks that every file can be opened (so a missing one fails before any work): NotFound or
  // another errno-derived status naming the path; InvalidArgument if `paths` is empty or
  // chunk_bytes < 1.
  static absl::StatusOr<std::unique_ptr<InputReader>> Open(std::vector<std::string> paths,
                                                           InputFormat format,
                                                           std::string document_separator,
                                                           int64_t chunk_bytes);
  ~InputReader();
  InputReader(const InputReader&) = delete;
  InputReader& operator=(const InputReader&) = delete;

  // Replaces *chunk's contents with the next records: whole records until their bytes reach
  // chunk_bytes or the input ends. Returns false (and an empty chunk) once the input is
  // exhausted. A read error is returned as a status naming the file (DataLoss).
  absl::StatusOr<bool> Next(InputChunk* chunk);

  const std::vector<std::string>& paths() const { return paths_; }
  // Sum of the files' sizes, or -1 if one of them is not a regular file (a pipe).
  int64_t total_bytes() const { return total_bytes_; }
  // Input bytes read so far (all of them once Next() has returned false).
  int64_t bytes_read() const { return bytes_read_; }

 private:
  InputReader(std::vector<std::string> paths, InputFormat format, std::string separator,
              int64_t chunk_bytes, int64_t total_bytes);
  // Appends the next record to *chunk; false when the input is exhausted.
  absl::StatusOr<bool> NextRecord(InputChunk* chunk);
  // Reads the next line of the current file into line_ (with its "\n" if any); false at the end
  // of the file, or when no file is open.
  absl::StatusOr<bool> ReadLine();
  // Closes the current file and opens the next; false when there is none.
  absl::StatusOr<bool> NextFile();
  void CloseFile();

  std::vector<std::string> paths_;
  InputFormat format_;
  std::string separator_;
  int64_t chunk_bytes_;
  int64_t total_bytes_;
  int64_t bytes_read_ = 0;

  FILE* current_ = nullptr;
  int64_t file_ = -1;     // Index of the current file.
  int64_t line_no_ = 0;   // Lines read from the current file.
  char* line_ = nullptr;  // getline() buffer.
  size_t line_capacity_ = 0;
  size_t line_size_ = 0;
};

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_PREPROCESSING_INPUT_READER_H_
