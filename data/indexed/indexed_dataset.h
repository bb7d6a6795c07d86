// Megatron-compatible indexed datasets: a reader (memory-mapped, zero-copy) and a streaming writer
// for the .bin/.idx pair that Megatron-LM's preprocess_data.py writes and its training reads.
//
// Format (Megatron-LM's MMIDIDX, version 1; all integers little-endian; `prefix.bin` and
// `prefix.idx`):
//   .bin: the token ids of every sequence, back to back, no header.
//   .idx:  offset 0   magic "MMIDIDX\0\0" (9 bytes)
//          offset 9   version, uint64 = 1
//          offset 17  dtype code, uint8 (TokenDType below)
//          offset 18  sequence count N, uint64
//          offset 26  document count D + 1, uint64
//          offset 34  sequence_lengths  int32[N]   (tokens per sequence)
//                     sequence_pointers int64[N]   (byte offset of each sequence in .bin)
//                     document_indices  int64[D+1] (0, then the exclusive end sequence of each
//                                                   document; non-decreasing, last = N)
// A document is a run of consecutive sequences (one per document for GPT; one per sentence when
// preprocessing splits sentences for BERT). Megatron's writer stores the sequences back to back in
// order, so sequence_pointers[i] = (lengths[0] + ... + lengths[i-1]) * itemsize; the reader
// requires exactly that, which also makes every document one contiguous run of tokens.
//
// Header arrays in the .idx are not naturally aligned (they start at byte 34), so the reader hands
// them out element by element (sequence_length(i) etc.) rather than as spans. Token data in .bin is
// aligned (the mapping is page-aligned and every pointer is a multiple of the item size), so token
// views are zero-copy spans.
#ifndef MT_DATA_INDEXED_INDEXED_DATASET_H_
#define MT_DATA_INDEXED_INDEXED_DATASET_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/indexed/file_util.h"
#include "glog/logging.h"

namespace mt {
namespace data {

// Megatron's dtype codes, as stored at .idx offset 17.
enum class TokenDType : uint8_t {
  kU8 = 1,
  kI8 = 2,
  kI16 = 3,
  kI32 = 4,
  kI64 = 5,
  kF64 = 6,
  kF32 = 7,
  kU16 = 8,
};

// Bytes per element.
size_t TokenDTypeSize(TokenDType dtype);
// "u8", "i8", "i16", "i32", "i64", "f64", "f32", "u16".
absl::string_view TokenDTypeName(TokenDType dtype);
// True for every code except f64 and f32 (token ids are integers).
bool IsIntegerTokenDType(TokenDType dtype);
// The dtype for a code; InvalidArgument for a code outside 1..8.
absl::StatusOr<TokenDType> TokenDTypeFromCode(uint8_t code);
// Megatron's rule: u16 when vocab_size < 65,500, else i32. vocab_size must be positive (CHECK).
TokenDType TokenDTypeForVocab(int64_t vocab_size);

// The TokenDType of a C++ element type: TokenDTypeOf<uint16_t>::value == TokenDType::kU16; the
// element types of the TokenDTypes only.
template <typename T>
struct TokenDTypeOf {
  static_assert(std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t> ||
                    std::is_same_v<T, int16_t> || std::is_same_v<T, int32_t> ||
                    std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                    std::is_same_v<T, float> || std::is_same_v<T, uint16_t>,
                "TokenDTypeOf: not the element type of a TokenDType");
  static constexpr TokenDType value = std::is_same_v<T, uint8_t>   ? TokenDType::kU8
                                      : std::is_same_v<T, int8_t>  ? TokenDType::kI8
                                      : std::is_same_v<T, int16_t> ? TokenDType::kI16
                                      : std::is_same_v<T, int32_t> ? TokenDType::kI32
                                      : std::is_same_v<T, int64_t> ? TokenDType::kI64
                                      : std::is_same_v<T, double>  ? TokenDType::kF64
                                      : std::is_same_v<T, float>   ? TokenDType::kF32
                                                                   : TokenDType::kU16;
};

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexVersion = 1;
// Bytes before sequence_lengths: magic, version, dtype code, N, D + 1.
inline constexpr int64_t kIndexHeaderBytes = 34;

// prefix + ".idx" / prefix + ".bin".
std::string IndexPath(absl::string_view prefix);
std::string BinPath(absl::string_view prefix);

// A read-only, non-owning view of `size` tokens of one dtype (for a reader, pointing into its
// mapping: valid while the IndexedDataset lives). Cheap to copy.
class TokenView {
 public:
  TokenView() = default;
  TokenView(const void* data, int64_t size, TokenDType dtype)
      : data_(static_cast<const uint8_t*>(data)), size_(size), dtype_(dtype) {}

  const void* data() const { return data_; }
  int64_t size() const { return size_; }
  TokenDType dtype() const { return dtype_; }

  // The tokens as a typed span; CHECK-fails unless T is the view's element type.
  template <typename T>
  absl::Span<const T> as() const {
    CHECK(TokenDTypeOf<T>::value == dtype_)
        << "tokens are " << TokenDTypeName(dtype_) << ", read as "
        << TokenDTypeName(TokenDTypeOf<T>::value);
    return absl::Span<const T>(reinterpret_cast<const T*>(data_), static_cast<size_t>(size_));
  }
  // Token i as an integer (floating dtypes are truncated). CHECK-fails if i is out of range.
  int64_t operator[](int64_t i) const;
  // Tokens [begin, begin + count); CHECK-fails if that is not inside the view.
  TokenView Subview(int64_t begin, int64_t count) const;
  // Copies the tokens into out (out.size() == size(), CHECK), converting to int32.
  void CopyTo(absl::Span<int32_t> out) const;
  std::vector<int64_t> ToVector() const;

 private:
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
  TokenDType dtype_ = TokenDType::kU16;
};

// A dataset opened read-only. Immutable after Open, so any number of threads may read it.
// Replacing the files by rename (as IndexedDatasetWriter does) leaves an open dataset reading the
// old contents; truncating them in place while open is not supported (the mapping would fault).
class IndexedDataset {
 public:
  // Maps prefix.idx and prefix.bin and validates them. Errors name the file and the problem:
  //   NotFound         a file is missing (other errno-derived codes for other open failures);
  //   InvalidArgument  bad magic (not a Megatron index), unsupported version, unknown dtype code;
  //   DataLoss         .idx truncated or its size inconsistent with the counts; a negative
  //                    length; a pointer misaligned, out of order or past the end of .bin; .bin
  //                    larger than the index describes; document indices not starting at 0, not
  //                    non-decreasing, or not ending at the sequence count.
  static absl::StatusOr<std::unique_ptr<IndexedDataset>> Open(absl::string_view prefix);

  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_documents_; }
  // Total tokens in .bin.
  int64_t num_tokens() const { return num_tokens_; }

  // The raw .idx arrays, element by element (CHECK on the index).
  int32_t sequence_length(int64_t i) const { return Load<int32_t>(lengths_, i, num_sequences_); }
  int64_t sequence_pointer(int64_t i) const { return Load<int64_t>(pointers_, i, num_sequences_); }
  // i in [0, num_documents()]: document d is sequences [document_index(d), document_index(d+1)).
  int64_t document_index(int64_t i) const {
    return Load<int64_t>(doc_indices_, i, num_documents_ + 1);
  }

  // The tokens of sequence i / document d (all its sequences, contiguous). CHECK on the index.
  TokenView sequence(int64_t i) const;
  TokenView document(int64_t d) const;
  // Tokens in document d.
  int64_t document_length(int64_t d) const;

 private:
  IndexedDataset() = default;
  // Checks the whole pair of files and sets the members below; DataLoss or InvalidArgument naming
  // the file and what is wrong. In steps: the index's header and the sizes of its arrays, the
  // sequences against the .bin, and the document boundaries.
  absl::Status Validate();
  absl::Status ValidateHeader();
  absl::Status ValidateSequences();
  absl::Status ValidateDocuments() const;

  template <typename T>
  static T Load(const uint8_t* base, int64_t i, int64_t n) {
    CHECK(i >= 0 && i < n) << "index " << i << " out of range [0, " << n << ")";
    T v;
    std::memcpy(&v, base + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return v;
  }

  std::string prefix_;
  MappedFile idx_;
  MappedFile bin_;
  TokenDType dtype_ = TokenDType::kU16;
  int64_t num_sequences_ = 0;
  int64_t num_documents_ = 0;
  int64_t num_tokens_ = 0;
  const uint8_t* lengths_ = nullptr;      // int32[N], unaligned.
  const uint8_t* pointers_ = nullptr;     // int64[N], unaligned.
  const uint8_t* doc_indices_ = nullptr;  // int64[D + 1], unaligned.
};

// Writes prefix.bin and prefix.idx, streaming: tokens go straight to the (buffered) .bin, and only
// the index arrays (4 bytes per sequence, 8 per document) are held in memory until Finalize()
// writes the .idx. Both files are written under temporary names and renamed into place by
// Finalize(), so a reader never sees a half-written dataset and a writer destroyed without
// Finalize() leaves no files behind (and any old dataset at the prefix untouched).
//
// Usage: AddSequence() one or more times, EndDocument(); repeat; Finalize(). Not thread-safe.
// Errors are sticky: after any failed call every later call returns FailedPrecondition.
class IndexedDatasetWriter {
 public:
  // InvalidArgument for a floating dtype; errno-derived statuses if the files cannot be created.
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> Create(absl::string_view prefix,
                                                                      TokenDType dtype);
  // The dtype from the vocabulary size (TokenDTypeForVocab); InvalidArgument if vocab_size <= 0.
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> CreateForVocab(
      absl::string_view prefix, int64_t vocab_size);
  ~IndexedDatasetWriter();

  // Appends one sequence. OutOfRange (naming the position and value) if a token does not fit the
  // dtype; InvalidArgument if the sequence has 2^31 tokens or more. Nothing is written on error.
  absl::Status AddSequence(absl::Span<const int32_t> tokens);
  absl::Status AddSequence(absl::Span<const int64_t> tokens);
  // Ends the current document (the sequences added since the last EndDocument). An empty document
  // is allowed, as in Megatron.
  absl::Status EndDocument();
  // AddSequence(tokens) then EndDocument().
  absl::Status AddDocument(absl::Span<const int32_t> tokens);
  // Appends every document of `other` (Megatron's merge, add_index): its tokens are copied to
  // .bin in chunks. InvalidArgument if its dtype differs; FailedPrecondition if a document is open.
  absl::Status Append(const IndexedDataset& other);
  // Writes the .idx and renames both files into place. FailedPrecondition if a document is still
  // open (sequences added after the last EndDocument) or Finalize already ran.
  absl::Status Finalize();

  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_indices_.size()) - 1; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  IndexedDatasetWriter(std::string prefix, TokenDType dtype, std::unique_ptr<AtomicOutputFile> bin);
  template <typename T>
  absl::Status AddSequenceImpl(absl::Span<const T> tokens);
  absl::Status Usable() const;
  // Records a failure so that later calls fail too.
  absl::Status Fail(absl::Status status);

  std::string prefix_;
  TokenDType dtype_;
  std::unique_ptr<AtomicOutputFile> bin_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_indices_{0};
  int64_t num_tokens_ = 0;
  std::vector<uint8_t> scratch_;  // One sequence converted to the dtype.
  bool finalized_ = false;
  absl::Status status_;
};

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_INDEXED_INDEXED_DATASET_H_
