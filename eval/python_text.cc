#include "eval/python_text.h"

#include <cstdint>

namespace mt {
namespace eval {
namespace {

bool IsSpace1(uint8_t c) { return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20); }

// U+0085 and U+00A0.
bool IsSpace2(const uint8_t* p) { return p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0); }

// U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool IsSpace3(const uint8_t* p) {
  if (p[0] == 0xe1) return p[1] == 0x9a && p[2] == 0x80;
  if (p[0] == 0xe3) return p[1] == 0x80 && p[2] == 0x80;
  if (p[0] != 0xe2) return false;
  if (p[1] == 0x81) return p[2] == 0x9f;
  if (p[1] != 0x80) return false;
  return (p[2] >= 0x80 && p[2] <= 0x8a) || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf;
}

const uint8_t* Bytes(absl::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

}  // namespace

size_t PySpacePrefix(absl::string_view s) {
  const uint8_t* p = Bytes(s);
  if (!s.empty() && IsSpace1(p[0])) return 1;
  if (s.size() >= 2 && IsSpace2(p)) return 2;
  if (s.size() >= 3 && IsSpace3(p)) return 3;
  return 0;
}

size_t PySpaceSuffix(absl::string_view s) {
  const uint8_t* end = Bytes(s) + s.size();
  if (!s.empty() && IsSpace1(end[-1])) return 1;
  if (s.size() >= 2 && IsSpace2(end - 2)) return 2;
  if (s.size() >= 3 && IsSpace3(end - 3)) return 3;
  return 0;
}

absl::string_view PyStrip(absl::string_view s) {
  for (size_t n = PySpacePrefix(s); n > 0; n = PySpacePrefix(s)) s.remove_prefix(n);
  for (size_t n = PySpaceSuffix(s); n > 0; n = PySpaceSuffix(s)) s.remove_suffix(n);
  return s;
}

std::vector<absl::string_view> PySplit(absl::string_view s) {
  std::vector<absl::string_view> words;
  size_t i = 0;
  size_t word_start = 0;
  bool in_word = false;
  while (i < s.size()) {
    const size_t space = PySpacePrefix(s.substr(i));
    if (space > 0) {
      if (in_word) words.push_back(s.substr(word_start, i - word_start));
      in_word = false;
      i += space;
      continue;
    }
    if (!in_word) word_start = i;
    in_word = true;
    ++i;
  }
  if (in_word) words.push_back(s.substr(word_start));
  return words;
}

std::string PyCollapseSpaces(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t space = PySpacePrefix(s.substr(i));
    if (space == 0) {
      out.push_back(s[i++]);
      continue;
    }
    while (space > 0) {
      i += space;
      space = PySpacePrefix(s.substr(i));
    }
    out.push_back(' ');
  }
  return out;
}

}  // namespace eval
}  // namespace mt
