#include "data/tokenizers/js_char_classes.h"

#include <unicode/uchar.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "data/tokenizers/assets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::data {
namespace {

using ::testing::HasSubstr;

std::string TempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << contents;
  return path;
}

JsCharClasses Installed() {
  absl::StatusOr<std::string> path = JsUnicodeClasses();
  EXPECT_TRUE(path.ok()) << path.status();
  absl::StatusOr<JsCharClasses> classes = JsCharClasses::Load(*path);
  EXPECT_TRUE(classes.ok()) << classes.status();
  return *std::move(classes);
}

TEST(JsCharClassesTest, ParsesRangesIntoLookups) {
  const std::string path = TempFile("classes.txt",
                                    "# js-unicode-classes v1 unicode=9.9 node=v0\n"
                                    "S 0009 000D\nN 0030 0039\nL 0041 005A\nL 10FFFE 10FFFF\n");
  absl::StatusOr<JsCharClasses> c = JsCharClasses::Load(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->unicode_version(), "9.9");
  EXPECT_EQ(c->Of(0x08), JsCharClass::kOther);
  EXPECT_EQ(c->Of(0x09), JsCharClass::kSpace);
  EXPECT_EQ(c->Of(0x0D), JsCharClass::kSpace);
  EXPECT_EQ(c->Of(0x0E), JsCharClass::kOther);
  EXPECT_EQ(c->Of('5'), JsCharClass::kNumber);
  EXPECT_EQ(c->Of('A'), JsCharClass::kLetter);
  EXPECT_EQ(c->Of('Z'), JsCharClass::kLetter);
  EXPECT_EQ(c->Of('a'), JsCharClass::kOther);
  EXPECT_EQ(c->Of(0x10FFFD), JsCharClass::kOther);
  EXPECT_EQ(c->Of(0x10FFFF), JsCharClass::kLetter);
  EXPECT_EQ(c->Of(-1), JsCharClass::kOther);
  EXPECT_EQ(c->Of(0x110000), JsCharClass::kOther);
}

TEST(JsCharClassesTest, RejectsMalformedFiles) {
  for (const char* bad : {"", "L 0041 005A\n", "# js-unicode-classes v1 node=x\n",
                          "# js-unicode-classes v1 unicode=1 \nQ 0041 005A\n",
                          "# js-unicode-classes v1 unicode=1 \nL 005A 0041\n",
                          "# js-unicode-classes v1 unicode=1 \nL 0041 005A\nN 0050 0060\n",
                          "# js-unicode-classes v1 unicode=1 \nL 0041 110000\n",
                          "# js-unicode-classes v1 unicode=1 \nL 0041\n"}) {
    absl::Status s = JsCharClasses::Load(TempFile("bad.txt", bad)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_THAT(s.message(), HasSubstr("bad.txt")) << bad;
  }
  EXPECT_EQ(JsCharClasses::Load("/nonexistent/classes.txt").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(JsCharClassesTest, InstalledTableHasTheRegexClasses) {
  const JsCharClasses c = Installed();
  for (int32_t cp :
       std::initializer_list<int32_t>{'a', 'Z', 0xE9, 0x3B1, 0x416, 0x5D0, 0x627, 0x915, 0x4E2D,
                                      0xAC00, 0x10400, 0x1D400, 0x20000}) {
    EXPECT_EQ(c.Of(cp), JsCharClass::kLetter) << std::hex << cp;
  }
  for (int32_t cp : std::initializer_list<int32_t>{'0', '9', 0xB2, 0xBD, 0x663, 0x967, 0x2162,
                                                   0x2460, 0xFF10, 0x1D7CE}) {
    EXPECT_EQ(c.Of(cp), JsCharClass::kNumber) << std::hex << cp;
  }
  // ECMAScript \s: WhiteSpace (incl. U+FEFF and every Zs) and LineTerminator.
  for (int32_t cp : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028,
                     0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF}) {
    EXPECT_EQ(c.Of(cp), JsCharClass::kSpace) << std::hex << cp;
  }
  for (int32_t cp :
       std::initializer_list<int32_t>{0x00, 0x1C, 0x85, 0x180E, 0x200B, '\'', '!', 0x300, 0x94D,
                                      0x2019, 0x1F600, 0xE000, 0x378, 0xFFFF}) {
    EXPECT_EQ(c.Of(cp), JsCharClass::kOther) << std::hex << cp;
  }
}

// An independent check of the node-generated table: ICU (Debian's, Unicode 15.0) must agree on
// every code point it knows to be assigned. Code points assigned after 15.0 may differ (that is
// why the table comes from node); category changes to old code points are rare, so allow a few.
TEST(JsCharClassesTest, AgreesWithIcuOnCodePointsAssignedInIcusUnicode) {
  const JsCharClasses c = Installed();
  std::vector<int32_t> mismatches;
  int assigned = 0;
  for (int32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (u_charType(cp) == U_UNASSIGNED || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
    ++assigned;
    const uint32_t mask = U_GET_GC_MASK(cp);
    JsCharClass want = JsCharClass::kOther;
    if (mask & U_GC_L_MASK) {
      want = JsCharClass::kLetter;
    } else if (mask & U_GC_N_MASK) {
      want = JsCharClass::kNumber;
    } else if ((mask & U_GC_ZS_MASK) || (cp >= 0x09 && cp <= 0x0D) || cp == 0x2028 ||
               cp == 0x2029 || cp == 0xFEFF) {
      want = JsCharClass::kSpace;
    }
    if (c.Of(cp) != want) mismatches.push_back(cp);
  }
  std::printf("ICU (Unicode %s) and node (Unicode %s) disagree on %zu of %d assigned code points\n",
              U_UNICODE_VERSION, c.unicode_version().c_str(), mismatches.size(), assigned);
  EXPECT_GT(assigned, 280000);  // Unicode 15.0 assigns ~289k code points (incl. private use).
  EXPECT_LE(mismatches.size(), 8u)
      << "first: U+" << std::hex << (mismatches.empty() ? 0 : mismatches[0]);
}

}  // namespace
}  // namespace mt::data
