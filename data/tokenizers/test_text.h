// Test fixture: a large, varied, deterministic UTF-8 text for checking tokenizers against their
// references and for benchmarking them (testonly).
#ifndef MT_DATA_TOKENIZERS_TEST_TEXT_H_
#define MT_DATA_TOKENIZERS_TEST_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mt::data::testing {

inline constexpr char kFortunesDir[] = "/usr/share/games/fortunes";

// The plain-text fortune files (Debian packages fortunes, fortunes-min) concatenated in name
// order, up to max_bytes (cut at a line end). NotFound, saying to run tools/setup.sh, if absent.
absl::StatusOr<std::string> FortunesProse(size_t max_bytes);

// About `bytes` bytes of generated text, deterministic for a seed: source code (C, Python, JSON,
// with tabs, CRLF and trailing spaces), numbers, sentences in CJK, Japanese, Korean, Cyrillic,
// Greek, Arabic, Hebrew, Devanagari and Thai, emoji (ZWJ sequences, skin tones, flags), combining
// marks, odd whitespace (NBSP, U+3000, U+2028, U+FEFF, U+0085, runs, \r\n), contractions in odd
// cases ("'S", "’s", "y'all'd've"), control characters, and random code points from every class,
// including letters assigned in Unicode 15.1-17.0. Always valid UTF-8.
std::string GeneratedText(size_t bytes, uint32_t seed);

// FortunesProse(prose_bytes) followed by GeneratedText(generated_bytes, seed).
absl::StatusOr<std::string> VariedText(size_t prose_bytes, size_t generated_bytes, uint32_t seed);

}  // namespace mt::data::testing

#endif  // MT_DATA_TOKENIZERS_TEST_TEXT_H_
