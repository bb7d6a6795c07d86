#include "data/tokenizers/js_char_classes.h"

#include <cstring>
#include <fstream>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace mt::data {
namespace {

constexpr int32_t kNumCodePoints = 0x110000;
constexpr char kHeader[] = "# js-unicode-classes v1 ";

}  // namespace

absl::StatusOr<JsCharClasses> JsCharClasses::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  auto bad = [&](int line_no, absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat(path, ":", line_no, ": ", why, "; rerun tools/setup.sh to regenerate it"));
  };

  std::string line;
  if (!std::getline(in, line) || line.rfind(kHeader, 0) != 0) {
    return bad(1, "missing '# js-unicode-classes v1' header");
  }
  JsCharClasses classes;
  for (absl::string_view field : absl::StrSplit(line, ' ')) {
    if (field.rfind("unicode=", 0) == 0) classes.unicode_version_ = std::string(field.substr(8));
  }
  if (classes.unicode_version_.empty()) return bad(1, "header names no unicode= version");

  std::vector<uint8_t> flat(kNumCodePoints, static_cast<uint8_t>(JsCharClass::kOther));
  int line_no = 1;
  int32_t prev_last = -1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    uint32_t first = 0, last = 0;
    if (f.size() != 3 || f[0].size() != 1 || !absl::SimpleHexAtoi(f[1], &first) ||
        !absl::SimpleHexAtoi(f[2], &last)) {
      return bad(line_no, "expected '<L|N|S> <first hex> <last hex>'");
    }
    JsCharClass c;
    switch (f[0][0]) {
      case 'L':
        c = JsCharClass::kLetter;
        break;
      case 'N':
        c = JsCharClass::kNumber;
        break;
      case 'S':
        c = JsCharClass::kSpace;
        break;
      default:
        return bad(line_no, "class must be L, N or S");
    }
    if (first > last || last >= static_cast<uint32_t>(kNumCodePoints) ||
        static_cast<int32_t>(first) <= prev_last) {
      return bad(line_no, "ranges must be ordered, disjoint and within U+0000..U+10FFFF");
    }
    prev_last = static_cast<int32_t>(last);
    std::memset(flat.data() + first, static_cast<int>(c), last - first + 1);
  }

  // Deduplicate 256-code-point blocks.
  std::map<std::string, uint16_t> seen;
  classes.index_.resize(kNumCodePoints >> 8);
  for (int32_t b = 0; b < (kNumCodePoints >> 8); ++b) {
    std::string block(reinterpret_cast<const char*>(flat.data()) + (b << 8), 256);
    auto [it, inserted] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
    if (inserted) classes.blocks_.insert(classes.blocks_.end(), block.begin(), block.end());
    classes.index_[b] = it->second;
  }
  return classes;
}

}  // namespace mt::data
