#include "core/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace mt {
namespace crc32c_internal {
namespace {

// The CRC register is kept raw here (no initial or final inversion): raw CRCs are linear over
// GF(2) in the register and the data together, which is what lets partial CRCs be joined.
struct ByteTable {
  uint32_t entry[256];
};

constexpr ByteTable MakeByteTable() {
  ByteTable t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r & 1) ? (r >> 1) ^ 0x82F63B78u : r >> 1;
    t.entry[b] = r;
  }
  return t;
}

constexpr ByteTable kByteTable = MakeByteTable();

uint32_t RawPortable(uint32_t crc, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kByteTable.entry[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

}  // namespace

uint32_t Portable(uint32_t crc, const void* data, size_t n) {
  return ~RawPortable(~crc, static_cast<const unsigned char*>(data), n);
}

#if defined(__x86_64__)

bool CpuHasSse42() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return has;
}

namespace {

// The raw register after kCrc32cBlock zero bytes, as a function of the register before: a linear
// map, so the XOR of the images of the register's four bytes, each looked up in its own table.
struct ShiftTables {
  uint32_t byte[4][256];
};

ShiftTables MakeShiftTables() {
  uint32_t column[32];  // The image of each single bit.
  for (int bit = 0; bit < 32; ++bit) {
    uint32_t r = uint32_t{1} << bit;
    for (size_t i = 0; i < kCrc32cBlock; ++i) r = kByteTable.entry[r & 0xff] ^ (r >> 8);
    column[bit] = r;
  }
  ShiftTables t{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t image = 0;
      for (int j = 0; j < 8; ++j) {
        if (b >> j & 1) image ^= column[8 * k + j];
      }
      t.byte[k][b] = image;
    }
  }
  return t;
}

uint32_t ShiftPastBlock(uint32_t crc) {
  static const ShiftTables tables = MakeShiftTables();
  return tables.byte[0][crc & 0xff] ^ tables.byte[1][(crc >> 8) & 0xff] ^
         tables.byte[2][(crc >> 16) & 0xff] ^ tables.byte[3][crc >> 24];
}

inline uint64_t Load8(const unsigned char* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);  // any alignment
  return word;
}

// The instruction takes the register as it stands (raw) and consumes its operand's bytes in
// memory order (x86 is little-endian), as the table does one at a time.
__attribute__((target("sse4.2"))) uint32_t RawSse42(uint32_t crc, const unsigned char* p,
                                                    size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) c = _mm_crc32_u64(c, Load8(p));
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

}  // namespace

uint32_t Sse42(uint32_t crc, const void* data, size_t n) {
  if (!CpuHasSse42()) return Portable(crc, data, n);
  return ~RawSse42(~crc, static_cast<const unsigned char*>(data), n);
}

__attribute__((target("sse4.2"))) uint32_t Sse42ThreeWay(uint32_t crc, const void* data, size_t n) {
  if (!CpuHasSse42()) return Portable(crc, data, n);
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c0 = ~crc;
  for (; n >= 3 * kCrc32cBlock; n -= 3 * kCrc32cBlock, p += 3 * kCrc32cBlock) {
    // Blocks A, B, C: the raw CRC of A B C from register r is
    // shift(shift(crc(r, A)) ^ crc(0, B)) ^ crc(0, C), shift: past kCrc32cBlock zero bytes.
    uint64_t c1 = 0;
    uint64_t c2 = 0;
    for (size_t i = 0; i < kCrc32cBlock; i += 8) {
      c0 = _mm_crc32_u64(c0, Load8(p + i));
      c1 = _mm_crc32_u64(c1, Load8(p + kCrc32cBlock + i));
      c2 = _mm_crc32_u64(c2, Load8(p + 2 * kCrc32cBlock + i));
    }
    c0 = ShiftPastBlock(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
    c0 = ShiftPastBlock(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c2);
  }
  return ~RawSse42(static_cast<uint32_t>(c0), p, n);
}

#else

bool CpuHasSse42() { return false; }
uint32_t Sse42(uint32_t crc, const void* data, size_t n) { return Portable(crc, data, n); }
uint32_t Sse42ThreeWay(uint32_t crc, const void* data, size_t n) { return Portable(crc, data, n); }

#endif

}  // namespace crc32c_internal

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  if (n == 0) return crc;
  return crc32c_internal::CpuHasSse42() ? crc32c_internal::Sse42ThreeWay(crc, data, n)
                                        : crc32c_internal::Portable(crc, data, n);
}

uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

std::string Crc32cHex(uint32_t crc) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) out[i] = kHex[crc & 15];
  return out;
}

std::optional<uint32_t> ParseCrc32cHex(absl::string_view hex) {
  if (hex.size() != 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : hex) {
    if (c >= '0' && c <= '9') {
      v = v << 4 | static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v = v << 4 | static_cast<uint32_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
  }
  return v;
}

}  // namespace mt
