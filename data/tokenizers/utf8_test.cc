#include "data/tokenizers/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace mt::data::internal {
namespace {

// Decodes all of s; invalid bytes appear as kInvalidCodePoint.
std::vector<int32_t> DecodeAll(const std::string& s) {
  std::vector<int32_t> out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    int len;
    out.push_back(DecodeUtf8(p, end, &len));
    EXPECT_GE(len, 1);
    p += len;
  }
  return out;
}

TEST(Utf8Test, RoundTripsEveryScalarValue) {
  for (int32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    AppendUtf8(cp, &s);
    const size_t want_len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    ASSERT_EQ(s.size(), want_len) << cp;
    ASSERT_EQ(DecodeAll(s), std::vector<int32_t>{cp}) << cp;
  }
}

TEST(Utf8Test, KnownEncodings) {
  EXPECT_EQ(DecodeAll("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),
            (std::vector<int32_t>{'a', 0xE9, 0x20AC, 0x1F600}));
}

TEST(Utf8Test, IllFormedSequencesAreInvalidOneByteAtATime) {
  const int32_t X = kInvalidCodePoint;
  EXPECT_EQ(DecodeAll("\x80"), (std::vector<int32_t>{X}));                // Lone continuation.
  EXPECT_EQ(DecodeAll("\xc0\xaf"), (std::vector<int32_t>{X, X}));         // Overlong '/'.
  EXPECT_EQ(DecodeAll("\xe0\x80\xaf"), (std::vector<int32_t>{X, X, X}));  // Overlong.
  EXPECT_EQ(DecodeAll("\xed\xa0\x80"), (std::vector<int32_t>{X, X, X}));  // Surrogate D800.
  EXPECT_EQ(DecodeAll("\xf4\x90\x80\x80"), (std::vector<int32_t>{X, X, X, X}));  // > U+10FFFF.
  EXPECT_EQ(DecodeAll("\xf5\x80"), (std::vector<int32_t>{X, X}));
  EXPECT_EQ(DecodeAll("\xe2\x82"), (std::vector<int32_t>{X, X}));  // Truncated at end.
  EXPECT_EQ(DecodeAll("\xe2\x82"
                      "a"),
            (std::vector<int32_t>{X, X, 'a'}));
  EXPECT_EQ(DecodeAll("\xff\xfe"), (std::vector<int32_t>{X, X}));
}

}  // namespace
}  // namespace mt::data::internal
