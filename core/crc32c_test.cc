#include "core/crc32c.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace {

using crc32c_internal::CpuHasSse42;
using crc32c_internal::kCrc32cBlock;

// The definition, one bit at a time: the reference none of the implementations share code with.
uint32_t BitwiseCrc32c(const unsigned char* p, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

// The check values of CRC32C: RFC 3720 (iSCSI), appendix B.4, and the usual "123456789".
struct CrcVector {
  std::string data;
  uint32_t crc;
};

std::vector<CrcVector> CrcVectors() {
  std::string ascending(32, '\0');
  std::string descending(32, '\0');
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<char>(i);
    descending[i] = static_cast<char>(31 - i);
  }
  return {{"123456789", 0xE3069283u},
          {std::string(32, '\0'), 0x8A9136AAu},
          {std::string(32, '\xff'), 0x62A8AB43u},
          {ascending, 0x46DD794Eu},
          {descending, 0x113FDB5Cu},
          {"", 0u}};
}

using Impl = uint32_t (*)(uint32_t, const void*, size_t);

std::vector<std::pair<const char*, Impl>> Impls() {
  std::vector<std::pair<const char*, Impl>> impls = {{"portable", crc32c_internal::Portable},
                                                     {"extend", Crc32cExtend}};
  if (CpuHasSse42()) {
    impls.push_back({"sse42", crc32c_internal::Sse42});
    impls.push_back({"sse42 three-way", crc32c_internal::Sse42ThreeWay});
  }
  return impls;
}

TEST(Crc32cTest, CheckValues) {
  for (const CrcVector& v : CrcVectors()) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data.data());
    EXPECT_EQ(BitwiseCrc32c(p, v.data.size()), v.crc) << v.data.size() << " bytes";
    EXPECT_EQ(Crc32c(v.data.data(), v.data.size()), v.crc) << v.data.size() << " bytes";
    for (const auto& [name, impl] : Impls()) {
      EXPECT_EQ(impl(0, v.data.data(), v.data.size()), v.crc) << name << ", " << v.data.size();
    }
  }
}

// Random bytes at every alignment and at lengths around the three-way loop's rounds (under one,
// exactly one, one and a tail, several), each against the bitwise definition.
TEST(Crc32cTest, AllAgreeAtAnyLengthAndAlignment) {
  if (!CpuHasSse42()) GTEST_LOG_(INFO) << "no SSE4.2: the portable path only";
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(7 * kCrc32cBlock + 64);
  for (unsigned char& b : buf) b = static_cast<unsigned char>(rng());
  const size_t round = 3 * kCrc32cBlock;
  const std::vector<size_t> lengths = {0,
                                       1,
                                       3,
                                       7,
                                       8,
                                       9,
                                       15,
                                       17,
                                       63,
                                       255,
                                       1021,
                                       round - 1,
                                       round,
                                       round + 1,
                                       round + 4093,
                                       2 * round,
                                       2 * round + 7};
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t n : lengths) {
      const uint32_t want = BitwiseCrc32c(buf.data() + offset, n);
      for (const auto& [name, impl] : Impls()) {
        ASSERT_EQ(impl(0, buf.data() + offset, n), want)
            << name << ", offset " << offset << ", " << n << " bytes";
      }
    }
  }
}

// A CRC computed in pieces of any size, the pieces split anywhere, equals the whole one.
TEST(Crc32cTest, ExtendInPiecesEqualsTheWhole) {
  std::mt19937 rng(11);
  std::vector<unsigned char> buf(5 * kCrc32cBlock + 333);
  for (unsigned char& b : buf) b = static_cast<unsigned char>(rng());
  const uint32_t whole = BitwiseCrc32c(buf.data(), buf.size());
  for (size_t piece : {size_t{1}, size_t{7}, size_t{4096}, size_t{12289}, size_t{40000}}) {
    for (const auto& [name, impl] : Impls()) {
      uint32_t crc = 0;
      for (size_t at = 0; at < buf.size(); at += piece) {
        crc = impl(crc, buf.data() + at, std::min(piece, buf.size() - at));
      }
      EXPECT_EQ(crc, whole) << name << ", pieces of " << piece;
    }
  }
  EXPECT_EQ(Crc32cExtend(0x12345678u, nullptr, 0), 0x12345678u);
}

TEST(Crc32cTest, Hex) {
  EXPECT_EQ(Crc32cHex(0xE3069283u), "e3069283");
  EXPECT_EQ(Crc32cHex(0x0000000Au), "0000000a");
  EXPECT_EQ(ParseCrc32cHex("e3069283"), 0xE3069283u);
  EXPECT_EQ(ParseCrc32cHex("0000000a"), 0x0000000Au);
  for (const char* bad :
       {"", "e306928", "e30692830", "E3069283", "e306928g", " e306928", "0x069283"}) {
    EXPECT_EQ(ParseCrc32cHex(bad), std::nullopt) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace mt
