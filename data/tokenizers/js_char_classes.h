// The code-point classes the GPT-2 pre-tokenisation regex distinguishes, exactly as the JavaScript
// regex engine of the reference encoder (npm gpt-3-encoder, run by node) sees them: \p{L}, \p{N}
// and \s (ECMAScript's WhiteSpace + LineTerminator, which differs from Python's and Rust's \s:
// it has U+FEFF and lacks U+0085). tools/setup.sh writes the table with node
// (tools/gen_js_unicode_classes.js) into the assets directory, so the C++ tokenizer follows the
// Unicode version of the node that defines the reference behaviour, whatever ICU the system has.
//
// Immutable after Load; thread-safe.
#ifndef MT_DATA_TOKENIZERS_JS_CHAR_CLASSES_H_
#define MT_DATA_TOKENIZERS_JS_CHAR_CLASSES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mt::data {

enum class JsCharClass : uint8_t {
  kOther = 0,   // [^\s\p{L}\p{N}]: punctuation, symbols, marks, controls, unassigned, ...
  kLetter = 1,  // \p{L}
  kNumber = 2,  // \p{N}
  kSpace = 3,   // \s
};

class JsCharClasses {
 public:
  // Parses a file written by tools/gen_js_unicode_classes.js. NotFound if it cannot be opened;
  // DataLoss (naming the file and line) if it is malformed.
  static absl::StatusOr<JsCharClasses> Load(const std::string& path);

  // The class of a code point in [0, 0x10FFFF]; anything else (e.g. an invalid byte) is kOther.
  JsCharClass Of(int32_t cp) const {
    if (static_cast<uint32_t>(cp) > 0x10FFFF) return JsCharClass::kOther;
    return static_cast<JsCharClass>(
        blocks_[(static_cast<uint32_t>(index_[cp >> 8]) << 8) | (cp & 0xFF)]);
  }

  // Unicode version of the node that wrote the table (e.g. "17.0").
  const std::string& unicode_version() const { return unicode_version_; }

 private:
  JsCharClasses() = default;

  // Two-stage table: index_[cp >> 8] names a 256-entry block of blocks_; identical blocks are
  // stored once (about 100 distinct blocks for all of Unicode).
  std::vector<uint16_t> index_;  // [0x1100]
  std::vector<uint8_t> blocks_;  // [num_blocks * 256]
  std::string unicode_version_;
};

}  // namespace mt::data

#endif  // MT_DATA_TOKENIZERS_JS_CHAR_CLASSES_H_
