// The direct reads and writes of SafetensorsReader::ReadMany and WriteSafetensorsWithDigests in
// place: straight into (out of) the tensors' memory where its addresses agree with the file
// offsets modulo the alignment, through the staging buffers elsewhere. The bytes, digests, guard
// bytes around the tensors and errors are those of the staged path; files of older writers (whose
// headers are not padded to a page) read the same.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_direct_testutil.h"
#include "checkpoint/sha256.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace checkpoint {
namespace {

// ---- Reads straight into the destinations (in place), where their addresses align as the file
// offsets do.

// The file's header length (the data region starts at 8 + it).
uint64_t HeaderLength(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  return n;
}

// The file as older writers left it: the header padded to a multiple of 8 only.
std::string WriteOldLayoutFile(const std::string& path, const std::vector<std::string>& contents) {
  WriteTestFile(path, contents);
  const std::string bytes = FileBytes(path);
  const uint64_t n = HeaderLength(path);
  std::string json = bytes.substr(8, n);
  json.erase(json.find_last_not_of(' ') + 1);
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t m = json.size();
  std::string out(reinterpret_cast<const char*>(&m), 8);
  out += json;
  out += bytes.substr(8 + n);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << out;
  return path;
}

// Destinations in page-aligned memory, each placed so that its address agrees with its file offset
// modulo kAlign (plus `shift` bytes), with guard bytes before and after.
struct AlignedDestinations {
  static constexpr size_t kAlign = 65536;  // The largest alignment tested.
  static constexpr size_t kGuard = 4096;
  std::vector<std::unique_ptr<char, decltype(&std::free)>> memory;
  std::vector<size_t> start, bytes;  // Where each tensor's bytes begin in its memory; how many.
  std::vector<SafetensorsReader::ReadRequest> requests;
};
AlignedDestinations MakeAlignedDestinations(const std::string& path,
                                            const SafetensorsReader& reader, size_t shift) {
  AlignedDestinations d;
  const uint64_t data_start = 8 + HeaderLength(path);
  for (const TestTensor& t : Layout()) {
    const size_t bytes = NumElements(t.shape) * DTypeSize(t.dtype);
    const size_t at = AlignedDestinations::kAlign +
                      (data_start + reader.Find(t.name)->begin) % AlignedDestinations::kAlign +
                      shift;
    const size_t total = at + bytes + AlignedDestinations::kGuard;
    const size_t a = AlignedDestinations::kAlign;
    d.memory.emplace_back(static_cast<char*>(std::aligned_alloc(a, (total + a - 1) / a * a)),
                          &std::free);
    std::memset(d.memory.back().get(), 0xa5, total);
    d.start.push_back(at);
    d.bytes.push_back(bytes);
    d.requests.push_back({t.name, TensorView(d.memory.back().get() + at, t.shape, t.dtype)});
  }
  return d;
}

// Each destination holds its tensor and every guard byte is untouched.
void ExpectAlignedRead(const AlignedDestinations& d, const std::vector<std::string>& contents) {
  for (size_t k = 0; k < contents.size(); ++k) {
    const char* m = d.memory[k].get();
    EXPECT_EQ(std::memcmp(m + d.start[k], contents[k].data(), d.bytes[k]), 0) << Layout()[k].name;
    size_t bad_guards = 0;
    for (size_t i = 0; i < d.start[k]; ++i) bad_guards += m[i] != '\xa5';
    for (size_t i = 0; i < AlignedDestinations::kGuard; ++i) {
      bad_guards += m[d.start[k] + d.bytes[k] + i] != '\xa5';
    }
    EXPECT_EQ(bad_guards, 0u) << Layout()[k].name;
  }
}

// The bytes of the tensors' aligned interiors of 1 MiB or more (the reader's threshold), worked
// out from the layout: what is read in place when destinations and offsets agree.
uint64_t ExpectedInPlace(const std::string& path, const SafetensorsReader& reader, uint64_t a) {
  const uint64_t data_start = 8 + HeaderLength(path);
  uint64_t total = 0;
  for (const TestTensor& t : Layout()) {
    const uint64_t begin = (data_start + reader.Find(t.name)->begin + a - 1) / a * a;
    const uint64_t end = (data_start + reader.Find(t.name)->end) / a * a;
    if (end > begin && end - begin >= (uint64_t{1} << 20)) total += end - begin;
  }
  return total;
}

TEST(SafetensorsDirectReadTest, ReadsStraightIntoDestinationsThatAlignLikeTheFile) {
  const std::vector<std::string> contents = Contents(9);
  const std::string new_path = WriteTestFile(TempPath("in_place"), contents);
  ASSERT_EQ((8 + HeaderLength(new_path)) % 4096, 0u) << "the writer pads the header to a page";
  const std::string old_path = WriteOldLayoutFile(TempPath("in_place_old"), contents);
  ASSERT_NE((8 + HeaderLength(old_path)) % 512, 0u) << "the test wants unaligned offsets";
  for (const std::string& path : {new_path, old_path}) {
    // The machine's file system (O_DIRECT where it takes it), and simulated direct reads that
    // refuse any misaligned request (so all bytes direct means every request was aligned).
    SimulatedDirectFileSystem fs512(512, INT_MAX), fs4096(4096, INT_MAX), fs64k(65536, INT_MAX);
    for (FileSystem* fs : std::vector<FileSystem*>{&DefaultFileSystem(), &fs512, &fs4096, &fs64k}) {
      absl::StatusOr<std::unique_ptr<DirectReadFile>> direct = fs->NewDirectReadFile(path);
      ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, *fs, contents));
      // Destinations that agree with the file, and the same 4 bytes further (nothing in place).
      for (size_t shift : {0, 4}) {
        SCOPED_TRACE(absl::StrCat(path, " alignment ", direct.ok() ? (*direct)->alignment() : 0,
                                  " shift ", shift));
        AlignedDestinations d = MakeAlignedDestinations(path, reader, shift);
        SafetensorsReader::ReadStats stats;
        ASSERT_OK(reader.ReadMany(d.requests, &stats));
        ExpectAlignedRead(d, contents);
        EXPECT_EQ(stats.direct_bytes + stats.buffered_bytes, Bytes(kAll));
        if (!direct.ok()) continue;  // No O_DIRECT here: all buffered, checked above.
        EXPECT_EQ(stats.direct_bytes, Bytes(kAll));
        const uint64_t want =
            shift == 0 ? ExpectedInPlace(path, reader, (*direct)->alignment()) : 0;
        EXPECT_EQ(stats.in_place_bytes, want);
        if (shift == 0) {
          EXPECT_GT(want, 10u << 20);  // "big" and "tail", less their heads and tails.
        }
      }
    }
  }
}

TEST(SafetensorsDirectReadTest, InPlaceReadsFallBackAndCatchCorruption) {
  const std::vector<std::string> contents = Contents(10);
  const std::string path = WriteTestFile(TempPath("in_place_faults"), contents);
  // Refused after three requests: the rest buffered, the same bytes, guards intact.
  {
    SimulatedDirectFileSystem fs(4096, 3);
    ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, fs, contents));
    AlignedDestinations d = MakeAlignedDestinations(path, reader, 0);
    SafetensorsReader::ReadStats stats;
    ASSERT_OK(reader.ReadMany(d.requests, &stats));
    ExpectAlignedRead(d, contents);
    EXPECT_GT(stats.buffered_bytes, 4u << 20);
    EXPECT_EQ(stats.direct_bytes + stats.buffered_bytes, Bytes(kAll));
  }
  // A flipped byte inside "big"'s in-place interior, in its staged head, and in "tail"'s staged
  // last bytes (the file's last 428 bytes at alignment 512).
  for (const auto& [tensor, at] : std::vector<std::pair<std::string, uint64_t>>{
           {"big", 5'000'000}, {"big", 1}, {"tail", 4'000'000}}) {
    SimulatedDirectFileSystem simulated(512, INT_MAX);
    for (const auto& [fs, crc32c] : EveryFileSystemAndDigest(&simulated)) {
      ASSERT_OK_AND_ASSIGN(SafetensorsReader reader, OpenChecked(path, *fs, contents, crc32c));
      FlipByte(path, reader, tensor, at);
      AlignedDestinations d = MakeAlignedDestinations(path, reader, 0);
      const absl::Status s = reader.ReadMany(d.requests);
      EXPECT_TRUE(absl::IsDataLoss(s)) << s;
      EXPECT_NE(s.message().find(absl::StrCat("tensor '", tensor, "' fails its ",
                                              crc32c ? "CRC32C" : "SHA-256", " check")),
                std::string::npos)
          << s;
      FlipByte(path, reader, tensor, at);  // Restored.
    }
  }
}

TEST(SafetensorsDirectWriteTest, WritesStraightFromTensorsThatAlignLikeTheFile) {
  const std::vector<std::string> contents = Contents(11);
  const SafetensorsMetadata metadata = {{"format", "pt"}};
  ASSERT_OK_AND_ASSIGN(const std::string expected, SerializeSafetensors(Named(contents), metadata));
  const std::string path = TempPath("written_in_place");
  ASSERT_OK(WriteSafetensorsWithDigests(path, Named(contents), metadata).status());
  ASSERT_OK_AND_ASSIGN(const SafetensorsReader layout, SafetensorsReader::Open(path));
  std::vector<std::string> want_digests;
  for (const std::string& c : contents) want_digests.push_back(Sha256Hex(c));
  // Sources whose addresses agree with their file offsets (and 4 bytes further: none in place),
  // with guard bytes around them, written through the machine's file system and simulated direct
  // writes that refuse anything misaligned.
  for (size_t shift : {0, 4}) {
    AlignedDestinations src = MakeAlignedDestinations(path, layout, shift);
    std::vector<NamedTensor> tensors;
    for (size_t k = 0; k < contents.size(); ++k) {
      std::memcpy(src.memory[k].get() + src.start[k], contents[k].data(), src.bytes[k]);
      tensors.push_back({Layout()[k].name, src.requests[k].dst});
    }
    SimulatedDirectFileSystem fs512(512, INT_MAX), fs64k(65536, INT_MAX);
    for (FileSystem* fs : std::vector<FileSystem*>{&DefaultFileSystem(), &fs512, &fs64k}) {
      ASSERT_OK_AND_ASSIGN(const std::vector<TensorDigests> digests,
                           WriteSafetensorsWithDigests(path, tensors, metadata, Sync::kNone, *fs));
      ASSERT_EQ(digests.size(), want_digests.size());
      for (size_t k = 0; k < digests.size(); ++k) EXPECT_EQ(digests[k].sha256, want_digests[k]);
      EXPECT_TRUE(FileBytes(path) == expected) << "shift " << shift;
      ExpectAlignedRead(src, contents);  // The sources and their guards are untouched.
      if (fs == &DefaultFileSystem()) continue;
      // The bytes written straight from the tensors' memory: their interiors of 1 MiB or more
      // between 4096-byte blocks (or the alignment, if larger).
      const uint64_t alignment = fs == &fs512 ? 512 : 65536;
      uint64_t in_place = 0;
      for (const auto& [from, n] : static_cast<SimulatedDirectFileSystem*>(fs)->writes().sources) {
        for (size_t k = 0; k < contents.size(); ++k) {
          const char* tensor = src.memory[k].get() + src.start[k];
          if (from >= tensor && from < tensor + src.bytes[k]) in_place += n;
        }
      }
      EXPECT_EQ(in_place,
                shift == 0 ? ExpectedInPlace(path, layout, std::max<uint64_t>(alignment, 4096)) : 0)
          << "alignment " << alignment << " shift " << shift;
    }
  }
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt
