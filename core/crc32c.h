// CRC32C (Castagnoli: the iSCSI polynomial 0x1EDC6F41, reflected 0x82F63B78, initial value and
// final XOR 0xFFFFFFFF), the checksum of TFRecord framing (train/tensorboard.h) and of each
// checkpoint tensor (checkpoint/checkpoint.h, "crc32c" in metadata.json).
//
// On x86-64 CPUs with SSE4.2 (checked once, at run time) the crc32 instruction computes it, on
// three independent streams at once: the instruction takes three cycles but can start one per
// cycle, so one stream leaves two thirds of it idle. Each round hashes three consecutive blocks
// of kCrc32cBlock bytes side by side and joins them by shifting a partial CRC past kCrc32cBlock
// zero bytes (a linear map of the 32-bit register, applied through four precomputed 256-entry
// tables). Elsewhere a table, one byte at a time. All the functions are pure and thread-safe.
#ifndef MT_CORE_CRC32C_H_
#define MT_CORE_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace mt {

// The CRC32C of n bytes (n may be 0; data may then be null): Crc32c("123456789", 9) ==
// 0xE3069283.
uint32_t Crc32c(const void* data, size_t n);
// The CRC32C of A followed by these n bytes, given crc == Crc32c(A): a CRC computed in pieces.
// Crc32cExtend(0, data, n) == Crc32c(data, n).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// "e3069283": 8 lowercase hex digits, most significant first.
std::string Crc32cHex(uint32_t crc);
// The inverse; nullopt unless `hex` is exactly 8 characters of [0-9a-f].
std::optional<uint32_t> ParseCrc32cHex(absl::string_view hex);

// The implementations Crc32cExtend chooses between, for tests and benchmarks. Each takes and
// returns a finished CRC, as Crc32cExtend does.
namespace crc32c_internal {

// Bytes per stream per round of the three-stream loop.
constexpr size_t kCrc32cBlock = 4096;

// Whether this CPU has SSE4.2 (checked once).
bool CpuHasSse42();
// The table, one byte at a time, on every CPU.
uint32_t Portable(uint32_t crc, const void* data, size_t n);
// The crc32 instruction on one stream, 8 bytes at a time; only where CpuHasSse42() (on other
// CPUs, Portable).
uint32_t Sse42(uint32_t crc, const void* data, size_t n);
// The crc32 instruction on three streams, joined (see above); the rest (under 3 kCrc32cBlock
// bytes) as Sse42. Only where CpuHasSse42() (on other CPUs, Portable).
uint32_t Sse42ThreeWay(uint32_t crc, const void* data, size_t n);

}  // namespace crc32c_internal
}  // namespace mt

#endif  // MT_CORE_CRC32C_H_
