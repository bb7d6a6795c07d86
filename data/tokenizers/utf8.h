// UTF-8 helpers shared by the tokenizers (internal to data/tokenizers).
//
// DecodeUtf8 accepts exactly the well-formed sequences of Unicode 15 table 3-7: no overlong forms,
// no surrogates (U+D800..U+DFFF), nothing above U+10FFFF. Anything else, including a sequence cut
// off by the end of the input, is reported one byte at a time as invalid, so a caller can decide
// per byte what to do with it (the GPT-2 tokenizer keeps it, the BERT tokenizer drops it).
#ifndef MT_DATA_TOKENIZERS_UTF8_H_
#define MT_DATA_TOKENIZERS_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace mt::data::internal {

inline constexpr int32_t kInvalidCodePoint = -1;

// Decodes the code point starting at p (requires p < end) and stores its length in bytes in *len.
// Returns kInvalidCodePoint with *len = 1 when the bytes at p do not start a well-formed sequence.
inline int32_t DecodeUtf8(const unsigned char* p, const unsigned char* end, int* len) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  *len = 1;
  const ptrdiff_t avail = end - p;
  auto cont = [&](int i) { return i < avail && (p[i] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1)) return kInvalidCodePoint;
    *len = 2;
    return ((b0 & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return kInvalidCodePoint;
    if (b0 == 0xE0 && p[1] < 0xA0) return kInvalidCodePoint;   // Overlong.
    if (b0 == 0xED && p[1] >= 0xA0) return kInvalidCodePoint;  // Surrogate.
    *len = 3;
    return ((b0 & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return kInvalidCodePoint;
    if (b0 == 0xF0 && p[1] < 0x90) return kInvalidCodePoint;   // Overlong.
    if (b0 == 0xF4 && p[1] >= 0x90) return kInvalidCodePoint;  // Above U+10FFFF.
    *len = 4;
    return ((b0 & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
  return kInvalidCodePoint;
}

// Appends the UTF-8 encoding of cp (a Unicode scalar value: 0..0x10FFFF, not a surrogate).
inline void AppendUtf8(int32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace mt::data::internal

#endif  // MT_DATA_TOKENIZERS_UTF8_H_
