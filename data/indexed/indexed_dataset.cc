#include "data/indexed/indexed_dataset.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mt {
namespace data {

// The .idx and .bin are little-endian and read and written with plain memcpy.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "indexed datasets need a little-endian host");

size_t TokenDTypeSize(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kU8:
    case TokenDType::kI8:
      return 1;
    case TokenDType::kI16:
    case TokenDType::kU16:
      return 2;
    case TokenDType::kI32:
    case TokenDType::kF32:
      return 4;
    case TokenDType::kI64:
    case TokenDType::kF64:
      return 8;
  }
  LOG(FATAL) << "bad TokenDType " << static_cast<int>(dtype);
  return 0;
}

absl::string_view TokenDTypeName(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kU8:
      return "u8";
    case TokenDType::kI8:
      return "i8";
    case TokenDType::kI16:
      return "i16";
    case TokenDType::kI32:
      return "i32";
    case TokenDType::kI64:
      return "i64";
    case TokenDType::kF64:
      return "f64";
    case TokenDType::kF32:
      return "f32";
    case TokenDType::kU16:
      return "u16";
  }
  return "?";
}

bool IsIntegerTokenDType(TokenDType dtype) {
  return dtype != TokenDType::kF32 && dtype != TokenDType::kF64;
}

absl::StatusOr<TokenDType> TokenDTypeFromCode(uint8_t code) {
  if (code < 1 || code > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype code ", static_cast<int>(code), " (Megatron's codes are 1-8)"));
  }
  return static_cast<TokenDType>(code);
}

TokenDType TokenDTypeForVocab(int64_t vocab_size) {
  CHECK_GT(vocab_size, 0);
  return vocab_size < 65500 ? TokenDType::kU16 : TokenDType::kI32;
}

std::string IndexPath(absl::string_view prefix) { return absl::StrCat(prefix, ".idx"); }
std::string BinPath(absl::string_view prefix) { return absl::StrCat(prefix, ".bin"); }

// ---------------------------------------------------------------------------------------------
// TokenView

namespace {

template <typename T>
T LoadAt(const uint8_t* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

}  // namespace

int64_t TokenView::operator[](int64_t i) const {
  CHECK(i >= 0 && i < size_) << "token " << i << " out of range [0, " << size_ << ")";
  switch (dtype_) {
    case TokenDType::kU8:
      return LoadAt<uint8_t>(data_, i);
    case TokenDType::kI8:
      return LoadAt<int8_t>(data_, i);
    case TokenDType::kI16:
      return LoadAt<int16_t>(data_, i);
    case TokenDType::kI32:
      return LoadAt<int32_t>(data_, i);
    case TokenDType::kI64:
      return LoadAt<int64_t>(data_, i);
    case TokenDType::kF64:
      return static_cast<int64_t>(LoadAt<double>(data_, i));
    case TokenDType::kF32:
      return static_cast<int64_t>(LoadAt<float>(data_, i));
    case TokenDType::kU16:
      return LoadAt<uint16_t>(data_, i);
  }
  return 0;
}

TokenView TokenView::Subview(int64_t begin, int64_t count) const {
  CHECK(begin >= 0 && count >= 0 && begin + count <= size_)
      << "subview [" << begin << ", " << begin + count << ") of " << size_ << " tokens";
  return TokenView(data_ + begin * static_cast<int64_t>(TokenDTypeSize(dtype_)), count, dtype_);
}

void TokenView::CopyTo(absl::Span<int32_t> out) const {
  CHECK_EQ(static_cast<int64_t>(out.size()), size_);
  switch (dtype_) {
    case TokenDType::kU16: {  // The common case (GPT-2, BERT vocabularies): a tight loop.
      const absl::Span<const uint16_t> in = as<uint16_t>();
      std::copy(in.begin(), in.end(), out.begin());
      return;
    }
    case TokenDType::kI32:
      std::memcpy(out.data(), data_, out.size() * sizeof(int32_t));
      return;
    default:
      for (int64_t i = 0; i < size_; ++i) out[i] = static_cast<int32_t>((*this)[i]);
  }
}

std::vector<int64_t> TokenView::ToVector() const {
  std::vector<int64_t> v(size_);
  for (int64_t i = 0; i < size_; ++i) v[i] = (*this)[i];
  return v;
}

// ---------------------------------------------------------------------------------------------
// IndexedDataset

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::Open(absl::string_view prefix) {
  std::unique_ptr<IndexedDataset> ds(new IndexedDataset());
  ds->prefix_ = std::string(prefix);
  ASSIGN_OR_RETURN(ds->idx_, MappedFile::Open(IndexPath(prefix)));
  ASSIGN_OR_RETURN(ds->bin_, MappedFile::Open(BinPath(prefix)));
  RETURN_IF_ERROR(ds->Validate());
  return ds;
}

absl::Status IndexedDataset::Validate() {
  RETURN_IF_ERROR(ValidateHeader());
  RETURN_IF_ERROR(ValidateSequences());
  return ValidateDocuments();
}

absl::Status IndexedDataset::ValidateHeader() {
  const std::string& ipath = idx_.path();
  const uint8_t* idx = idx_.data();
  const uint64_t idx_size = idx_.size();

  if (idx_size >= sizeof(kIndexMagic) && std::memcmp(idx, kIndexMagic, sizeof(kIndexMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        ipath, ": bad magic (expected \"MMIDIDX\\0\\0\"): not a Megatron indexed-dataset index"));
  }
  if (idx_size < static_cast<uint64_t>(kIndexHeaderBytes)) {
    return absl::DataLossError(absl::StrCat(ipath, ": truncated: ", idx_size,
                                            " bytes, but the header alone needs ",
                                            kIndexHeaderBytes));
  }
  const uint64_t version = LoadAt<uint64_t>(idx + 9, 0);
  if (version != kIndexVersion) {
    return absl::InvalidArgumentError(absl::StrCat(ipath, ": unsupported version ", version,
                                                   " (this reader supports version ", kIndexVersion,
                                                   ")"));
  }
  absl::StatusOr<TokenDType> dtype = TokenDTypeFromCode(idx[17]);
  if (!dtype.ok())
    return absl::InvalidArgumentError(absl::StrCat(ipath, ": ", dtype.status().message()));
  dtype_ = *dtype;
  const uint64_t n = LoadAt<uint64_t>(idx + 18, 0);
  const uint64_t d1 = LoadAt<uint64_t>(idx + 26, 0);
  if (d1 == 0) {
    return absl::DataLossError(
        absl::StrCat(ipath, ": document count field is 0 (it counts D + 1 entries, at least 1)"));
  }
  // Bound the counts by the file size before multiplying, so that garbage cannot overflow.
  const uint64_t body = idx_size - kIndexHeaderBytes;
  if (n > body / 12 || d1 > body / 8 || 12 * n + 8 * d1 != body) {
    const bool huge = n > body / 12 || d1 > body / 8;
    const std::string need = huge ? "more" : absl::StrCat(kIndexHeaderBytes + 12 * n + 8 * d1);
    const bool shorter = huge || 12 * n + 8 * d1 > body;
    return absl::DataLossError(absl::StrCat(
        ipath, ": ", shorter ? "truncated or corrupt" : "trailing bytes", ": the file has ",
        idx_size, " bytes, but ", n, " sequences and ", d1 - 1, " documents need ", need));
  }
  num_sequences_ = static_cast<int64_t>(n);
  num_documents_ = static_cast<int64_t>(d1) - 1;
  lengths_ = idx + kIndexHeaderBytes;
  pointers_ = lengths_ + 4 * n;
  doc_indices_ = pointers_ + 8 * n;
  return absl::OkStatus();
}

// Sequence i must lie inside the .bin, right after sequence i - 1, and the last must end the file.
absl::Status IndexedDataset::ValidateSequences() {
  const std::string& ipath = idx_.path();
  const std::string& bpath = bin_.path();
  const int64_t item = static_cast<int64_t>(TokenDTypeSize(dtype_));
  const int64_t bin_size = static_cast<int64_t>(bin_.size());
  int64_t expected = 0;  // Byte offset where sequence i must start.
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int64_t len = LoadAt<int32_t>(lengths_, i);
    const int64_t ptr = LoadAt<int64_t>(pointers_, i);
    if (len < 0) {
      return absl::DataLossError(
          absl::StrCat(ipath, ": sequence_lengths[", i, "] = ", len, " is negative"));
    }
    if (ptr < 0 || ptr > bin_size || len * item > bin_size - ptr) {
      return absl::DataLossError(
          absl::StrCat(ipath, ": sequence ", i, " (bytes [", ptr, ", ", ptr + len * item,
                       ")) lies past the end of ", bpath, " (", bin_size,
                       " bytes): the .bin is truncated or belongs to another index"));
    }
    if (ptr != expected) {
      return absl::DataLossError(absl::StrCat(ipath, ": sequence_pointers[", i, "] = ", ptr,
                                              ", expected ", expected,
                                              " (sequences are stored back to back)"));
    }
    expected += len * item;
  }
  if (expected != bin_size) {
    return absl::DataLossError(absl::StrCat(
        bpath, ": size mismatch: the file has ", bin_size, " bytes, but ", ipath, " describes ",
        expected, " (", num_sequences_, " sequences of ", TokenDTypeName(dtype_), ")"));
  }
  num_tokens_ = bin_size / item;
  return absl::OkStatus();
}

// document_indices start at 0, never decrease and end at the sequence count.
absl::Status IndexedDataset::ValidateDocuments() const {
  const std::string& ipath = idx_.path();
  if (LoadAt<int64_t>(doc_indices_, 0) != 0) {
    return absl::DataLossError(absl::StrCat(
        ipath, ": document_indices[0] = ", LoadAt<int64_t>(doc_indices_, 0), ", expected 0"));
  }
  for (int64_t i = 1; i <= num_documents_; ++i) {
    const int64_t prev = LoadAt<int64_t>(doc_indices_, i - 1);
    const int64_t cur = LoadAt<int64_t>(doc_indices_, i);
    if (cur < prev) {
      return absl::DataLossError(absl::StrCat(ipath, ": document_indices decrease at ", i, " (",
                                              prev, " then ", cur, ")"));
    }
  }
  const int64_t last = LoadAt<int64_t>(doc_indices_, num_documents_);
  if (last != num_sequences_) {
    return absl::DataLossError(absl::StrCat(ipath, ": document_indices end at ", last,
                                            ", expected the sequence count ", num_sequences_));
  }
  return absl::OkStatus();
}

TokenView IndexedDataset::sequence(int64_t i) const {
  const int64_t ptr = sequence_pointer(i);  // CHECKs i.
  return TokenView(bin_.data() + ptr, sequence_length(i), dtype_);
}

TokenView IndexedDataset::document(int64_t d) const {
  CHECK(d >= 0 && d < num_documents_)
      << "document " << d << " out of range [0, " << num_documents_ << ")";
  const int64_t first = document_index(d);
  const int64_t end = document_index(d + 1);
  if (first == end) return TokenView(bin_.data(), 0, dtype_);
  // Sequences are back to back (checked by Validate), so the document is one run.
  const int64_t ptr = sequence_pointer(first);
  const int64_t bytes = sequence_pointer(end - 1) +
                        sequence_length(end - 1) * static_cast<int64_t>(TokenDTypeSize(dtype_)) -
                        ptr;
  return TokenView(bin_.data() + ptr, bytes / static_cast<int64_t>(TokenDTypeSize(dtype_)), dtype_);
}

int64_t IndexedDataset::document_length(int64_t d) const { return document(d).size(); }

// ---------------------------------------------------------------------------------------------
// IndexedDatasetWriter

namespace {

// Converts tokens to Out, checking that each fits.
template <typename Out, typename In>
absl::Status ConvertTokens(absl::Span<const In> in, TokenDType dtype, std::vector<uint8_t>* out) {
  out->resize(in.size() * sizeof(Out));
  Out* o = reinterpret_cast<Out*>(out->data());
  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t v = static_cast<int64_t>(in[i]);
    if (v < static_cast<int64_t>(std::numeric_limits<Out>::min()) ||
        v > static_cast<int64_t>(std::numeric_limits<Out>::max())) {
      return absl::OutOfRangeError(absl::StrCat("token ", i, " of the sequence is ", v,
                                                ", which does not fit dtype ",
                                                TokenDTypeName(dtype)));
    }
    o[i] = static_cast<Out>(v);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::Create(
    absl::string_view prefix, TokenDType dtype) {
  if (!IsIntegerTokenDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("IndexedDatasetWriter(", prefix, "): dtype ",
                                                   TokenDTypeName(dtype),
                                                   " cannot hold token ids; use u16 or i32"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicOutputFile> bin,
                   AtomicOutputFile::Create(BinPath(prefix)));
  return std::unique_ptr<IndexedDatasetWriter>(
      new IndexedDatasetWriter(std::string(prefix), dtype, std::move(bin)));
}

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::CreateForVocab(
    absl::string_view prefix, int64_t vocab_size) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "IndexedDatasetWriter(", prefix, "): vocab_size must be positive, got ", vocab_size));
  }
  return Create(prefix, TokenDTypeForVocab(vocab_size));
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDType dtype,
                                           std::unique_ptr<AtomicOutputFile> bin)
    : prefix_(std::move(prefix)), dtype_(dtype), bin_(std::move(bin)) {}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

absl::Status IndexedDatasetWriter::Usable() const {
  if (finalized_) {
    return absl::FailedPreconditionError(
        absl::StrCat("IndexedDatasetWriter(", prefix_, "): already finalized"));
  }
  if (!status_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "IndexedDatasetWriter(", prefix_, "): an earlier write failed: ", status_.message()));
  }
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Fail(absl::Status status) {
  status_ = status;
  return status;
}

template <typename T>
absl::Status IndexedDatasetWriter::AddSequenceImpl(absl::Span<const T> tokens) {
  RETURN_IF_ERROR(Usable());
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("IndexedDatasetWriter(", prefix_,
                                                   "): a sequence of ", tokens.size(),
                                                   " tokens does not fit the int32 length field"));
  }
  absl::Status s;
  switch (dtype_) {
    case TokenDType::kU8:
      s = ConvertTokens<uint8_t>(tokens, dtype_, &scratch_);
      break;
    case TokenDType::kI8:
      s = ConvertTokens<int8_t>(tokens, dtype_, &scratch_);
      break;
    case TokenDType::kI16:
      s = ConvertTokens<int16_t>(tokens, dtype_, &scratch_);
      break;
    case TokenDType::kI32:
      s = ConvertTokens<int32_t>(tokens, dtype_, &scratch_);
      break;
    case TokenDType::kI64:
      s = ConvertTokens<int64_t>(tokens, dtype_, &scratch_);
      break;
    case TokenDType::kU16:
      s = ConvertTokens<uint16_t>(tokens, dtype_, &scratch_);
      break;
    case TokenDType::kF32:
    case TokenDType::kF64:
      LOG(FATAL) << "floating dtypes are rejected by Create";
  }
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("IndexedDatasetWriter(", prefix_, "): sequence ",
                                               lengths_.size(), ": ", s.message()));
  }
  absl::Status w = bin_->Append(scratch_.data(), scratch_.size());
  if (!w.ok()) return Fail(w);
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  num_tokens_ += static_cast<int64_t>(tokens.size());
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::AddSequence(absl::Span<const int32_t> tokens) {
  return AddSequenceImpl(tokens);
}

absl::Status IndexedDatasetWriter::AddSequence(absl::Span<const int64_t> tokens) {
  return AddSequenceImpl(tokens);
}

absl::Status IndexedDatasetWriter::EndDocument() {
  RETURN_IF_ERROR(Usable());
  doc_indices_.push_back(static_cast<int64_t>(lengths_.size()));
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::AddDocument(absl::Span<const int32_t> tokens) {
  RETURN_IF_ERROR(AddSequence(tokens));
  return EndDocument();
}

absl::Status IndexedDatasetWriter::Append(const IndexedDataset& other) {
  RETURN_IF_ERROR(Usable());
  if (other.dtype() != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "IndexedDatasetWriter(", prefix_, "): cannot append ", other.prefix(), " (dtype ",
        TokenDTypeName(other.dtype()), ") to a dataset of dtype ", TokenDTypeName(dtype_)));
  }
  if (static_cast<int64_t>(lengths_.size()) != doc_indices_.back()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "IndexedDatasetWriter(", prefix_, "): call EndDocument before appending ", other.prefix()));
  }
  if (other.num_sequences() > 0) {
    // The sequences are one contiguous run in the other .bin: copy it through the write buffer.
    const void* start = other.sequence(0).data();
    absl::Status w =
        bin_->Append(start, static_cast<size_t>(other.num_tokens()) * TokenDTypeSize(dtype_));
    if (!w.ok()) return Fail(w);
  }
  const int64_t offset = static_cast<int64_t>(lengths_.size());
  lengths_.reserve(lengths_.size() + other.num_sequences());
  for (int64_t i = 0; i < other.num_sequences(); ++i) lengths_.push_back(other.sequence_length(i));
  for (int64_t d = 1; d <= other.num_documents(); ++d) {
    doc_indices_.push_back(offset + other.document_index(d));
  }
  num_tokens_ += other.num_tokens();
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Finalize() {
  RETURN_IF_ERROR(Usable());
  if (static_cast<int64_t>(lengths_.size()) != doc_indices_.back()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "IndexedDatasetWriter(", prefix_, "): ", lengths_.size() - doc_indices_.back(),
        " sequence(s) added after the last EndDocument; end the document before Finalize"));
  }
  // Write the whole .idx under its temporary name first, then rename .bin and .idx: a failure
  // before the renames leaves any old dataset at the prefix as it was.
  absl::StatusOr<std::unique_ptr<AtomicOutputFile>> idx_or =
      AtomicOutputFile::Create(IndexPath(prefix_));
  if (!idx_or.ok()) return Fail(idx_or.status());
  AtomicOutputFile& idx = **idx_or;
  const uint64_t n = lengths_.size();
  const uint64_t d1 = doc_indices_.size();
  const uint8_t code = static_cast<uint8_t>(dtype_);
  absl::Status s = idx.Append(kIndexMagic, sizeof(kIndexMagic));
  if (s.ok()) s = idx.Append(&kIndexVersion, sizeof(kIndexVersion));
  if (s.ok()) s = idx.Append(&code, 1);
  if (s.ok()) s = idx.Append(&n, sizeof(n));
  if (s.ok()) s = idx.Append(&d1, sizeof(d1));
  if (s.ok()) s = idx.Append(lengths_.data(), lengths_.size() * sizeof(int32_t));
  const int64_t item = static_cast<int64_t>(TokenDTypeSize(dtype_));
  int64_t pointer = 0;
  for (size_t i = 0; s.ok() && i < lengths_.size(); ++i) {
    s = idx.Append(&pointer, sizeof(pointer));
    pointer += lengths_[i] * item;
  }
  if (s.ok()) s = idx.Append(doc_indices_.data(), doc_indices_.size() * sizeof(int64_t));
  if (s.ok()) s = bin_->Commit();
  if (s.ok()) s = idx.Commit();
  if (!s.ok()) return Fail(s);
  finalized_ = true;
  return absl::OkStatus();
}

}  // namespace data
}  // namespace mt
