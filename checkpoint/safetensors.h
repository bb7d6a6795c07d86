// The safetensors file format (https://github.com/huggingface/safetensors), written and read
// exactly:
//
//   bytes [0, 8)        N, the header length, uint64 little-endian
//   bytes [8, 8 + N)    a UTF-8 JSON object, padded with trailing spaces so 8 + N is a multiple of
//                       8 (this writer pads to a multiple of 4096, a page, so that tensors whose
//                       offsets fall on blocks can be read straight into aligned memory):
//                         {"<tensor name>": {"dtype": "F32", "shape": [2, 3],
//                                            "data_offsets": [begin, end]}, ...,
//                          "__metadata__": {"<key>": "<string value>", ...}}   (optional)
//   bytes [8 + N, EOF)  the data region: every tensor's elements, row-major, little-endian;
//                       data_offsets are relative to its start, and the tensors tile it exactly
//                       (no gaps, no overlaps, nothing after the last one).
//
// Supported element types are the project's DTypes: F32, BF16, F16, I32, I64, U16. Files written
// here are readable by the reference Python/Rust implementations, and theirs by this reader (as
// long as they use these dtypes).
#ifndef MT_CHECKPOINT_SAFETENSORS_H_
#define MT_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/digest_workers.h"
#include "core/file_system.h"
#include "core/tensor.h"

namespace mt {
namespace checkpoint {

// The safetensors spelling of a dtype: "F32", "BF16", "F16", "I32", "I64", "U16".
absl::string_view SafetensorsDTypeName(DType dtype);
// The inverse; Unimplemented for a dtype of the format that the project has no DType for ("F64",
// "I8", "BOOL", ...), InvalidArgument for a name the format does not define.
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

// String key/value pairs of the header's "__metadata__" object.
using SafetensorsMetadata = std::map<std::string, std::string>;

// One tensor to write: a contiguous CPU view, any supported dtype.
struct NamedTensor {
  std::string name;
  TensorView view;
};

// Writes `tensors` (in the given order) to `path`, replacing the file; with Sync::kFsync the file
// is fsynced before it is closed. This is a plain write: callers that need atomicity write to a
// temporary name and rename it (see checkpoint.h).
// InvalidArgument (naming the tensor) for an empty, duplicate or non-UTF-8 name, the reserved name
// "__metadata__", a non-contiguous or non-CPU view; an errno-derived status naming the path for
// file-system errors (ResourceExhausted when the disk is full).
absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const SafetensorsMetadata& metadata = {}, Sync sync = Sync::kNone,
                              FileSystem& fs = DefaultFileSystem());

// WriteSafetensors, returning the SHA-256 (lowercase hex) and the CRC32C of each tensor's bytes as
// written (in the order of `tensors`), both computed in one pass on worker threads while the file
// is written (checkpoint/digest_workers.h): the data go to the
// file in large writes straight from the tensors' memory, and the digests cost no time of their
// own where there are cores to spare. From kDirectWriteFrom bytes on, where the file system offers
// direct writes (FileSystem::NewDirectWritableFile), the file is written around the page cache
// from aligned staging buffers (the same bytes; where the kernel refuses, through the cache).
constexpr uint64_t kDirectWriteFrom = uint64_t{8} << 20;
absl::StatusOr<std::vector<TensorDigests>> WriteSafetensorsWithDigests(
    const std::string& path, const std::vector<NamedTensor>& tensors,
    const SafetensorsMetadata& metadata = {}, Sync sync = Sync::kNone,
    FileSystem& fs = DefaultFileSystem());

// The whole file in memory (same checks as WriteSafetensors, without the file-system ones).
absl::StatusOr<std::string> SerializeSafetensors(const std::vector<NamedTensor>& tensors,
                                                 const SafetensorsMetadata& metadata = {});

// Where one tensor lives in a file.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // Byte offsets relative to the data region, [begin, end).
  uint64_t end = 0;
};

// A validated safetensors file, open for reading. Open() checks the whole layout: the header
// length against the file size, the JSON, every entry's dtype, shape and offsets (in range, equal
// to numel * element size, tiling the data region exactly), no duplicate names or keys; any
// violation is DataLoss with a message "<path>: <what is wrong>" (Unimplemented for a dtype the
// project does not support). Tensor data are read on demand (RandomAccessFile::Read), so a reader
// may be used from several threads at once. Move-only.
class SafetensorsReader {
 public:
  // NotFound / PermissionDenied naming the path if it cannot be opened; DataLoss if malformed.
  static absl::StatusOr<SafetensorsReader> Open(const std::string& path,
                                                FileSystem& fs = DefaultFileSystem());

  SafetensorsReader() = default;
  SafetensorsReader(SafetensorsReader&& other) noexcept = default;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept = default;

  const std::string& path() const { return path_; }
  // Entries in data-region order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsMetadata& metadata() const { return metadata_; }
  // The entry called `name`, or nullptr.
  const SafetensorsEntry* Find(absl::string_view name) const;
  // From now on, Read() and ReadTensor() of tensor `name` check the bytes they read against
  // `sha256_hex` (lowercase hex SHA-256 of the tensor's bytes in the file, as sha256sum prints it
  // for that byte range): a mismatch is DataLoss "<path>: tensor '<name>' fails its SHA-256
  // check ...". NotFound if there is no such tensor; InvalidArgument for a malformed digest.
  absl::Status ExpectSha256(absl::string_view name, const std::string& sha256_hex);
  // Likewise with the CRC32C of the tensor's bytes (core/crc32c.h): DataLoss "<path>: tensor
  // '<name>' fails its CRC32C check ..."; NotFound if there is no such tensor. A tensor may be
  // given both; each is then checked.
  absl::Status ExpectCrc32c(absl::string_view name, uint32_t crc32c);

  // Copies the tensor into `dst` (a contiguous CPU view of the same dtype and shape).
  // NotFound if there is no such tensor; InvalidArgument (naming the tensor) for a mismatched
  // `dst`; DataLoss if the file has been truncated since it was opened.
  absl::Status Read(absl::string_view name, const TensorView& dst) const;
  // The tensor in a newly allocated host Tensor; NotFound / DataLoss as for Read().
  absl::StatusOr<Tensor> ReadTensor(absl::string_view name) const;

  // One tensor to read and where to.
  struct ReadRequest {
    std::string name;
    TensorView dst;
  };
  // How ReadMany read its bytes.
  struct ReadStats {
    uint64_t direct_bytes = 0;    // Tensor bytes read around the page cache (O_DIRECT).
    uint64_t buffered_bytes = 0;  // Tensor bytes read through it.
    uint64_t in_place_bytes = 0;  // Of direct_bytes, those read straight into the destinations.
  };
  // Read() of each request, as one pass over the file: every request is checked first (the
  // errors of Read(), before anything is read), then the tensors are read in the file's order in
  // large pieces while worker threads check the digests of what has been read, so that checking
  // overlaps reading (one worker where only CRC32Cs are checked, one per core, up to 4, for
  // SHA-256s). A digest mismatch is the DataLoss of Read() (the first tensor in the file
  // that fails); the destinations may then have been written.
  // From kDirectReadFrom bytes on, where the file system offers direct reads (FileSystem::
  // NewDirectReadFile), the pieces are read around the page cache: straight into the destinations
  // where their addresses align as the file offsets do (tensors of whole blocks, in memory of
  // 1 MiB or more, core/tensor.cc, from files this writer pads), else into aligned
  // staging buffers and copied (internal/direct_read.h); where the kernel refuses them, the rest
  // is read through the page cache. The bytes, digests and errors are the same.
  absl::Status ReadMany(const std::vector<ReadRequest>& requests, ReadStats* stats = nullptr) const;
  static constexpr uint64_t kDirectReadFrom = uint64_t{8} << 20;

 private:
  std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  std::unique_ptr<DirectReadFile> direct_;  // Null where the file system offers no direct reads.
  uint64_t data_start_ = 0;                 // 8 + N.
  std::vector<SafetensorsEntry> entries_;
  absl::flat_hash_map<std::string, size_t> index_;  // Name -> position in entries_.
  // The entry of `name` if `dst` can receive it (NotFound / InvalidArgument as Read()).
  absl::StatusOr<const SafetensorsEntry*> CheckRead(absl::string_view name,
                                                    const TensorView& dst) const;

  // The digests a tensor is checked against: a hex SHA-256 (empty: none), a CRC32C.
  struct Expected {
    std::string sha256;
    std::optional<uint32_t> crc32c;
  };
  absl::flat_hash_map<std::string, Expected> expected_;  // By tensor name.
  // DataLoss naming the tensor, the byte range and both values for the first mismatch.
  absl::Status CheckDigests(const SafetensorsEntry& e, const Expected& expected,
                            const TensorDigests& actual) const;
  SafetensorsMetadata metadata_;
};

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_SAFETENSORS_H_
