#include "data/tokenizers/test_text.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/tokenizers/utf8.h"

namespace mt::data::testing {
namespace {

// Word pools, typed by hand. Mn marks (Arabic harakat, Hebrew niqqud, Devanagari signs) are part
// of some words on purpose: they are not \p{L} and split GPT-2's letter runs.
// clang-format off
const char* const kIdentifiers[] = {
    "foo", "bar", "baz", "x", "i", "j", "n", "kMaxLen", "HTTPServer", "getValue", "__init__",
    "self", "data_2", "std", "vector", "tokenizer", "num_layers", "_private", "camelCaseName",
    "SCREAMING_CASE", "α", "résumé", "数据", "i18n", "x86_64", "utf8", "len", "printf"};
const char* const kCyrillic[] = {
    "привет", "мир", "как", "дела", "Москва", "хорошо", "спасибо", "Ёлка", "ЗДРАВСТВУЙТЕ",
    "съешь", "ещё", "этих", "мягких", "французских", "булок", "Україна", "їжак"};
const char* const kGreek[] = {
    "γειά", "σου", "κόσμε", "Αθήνα", "ΟΔΟΣ", "φιλοσοφία", "λόγος", "ΣΊΣΥΦΟΣ", "ἀρχή"};
const char* const kArabic[] = {
    "مرحبا", "بالعالم", "السلام", "عليكم", "كتاب", "الْعَرَبِيَّة", "١٢٣", "٤٥٦٫٧", "فارسی", "۱۴۰۳"};
const char* const kHebrew[] = {"שלום", "עולם", "תודה", "בְּרֵאשִׁית", "ירושלים"};
const char* const kDevanagari[] = {
    "नमस्ते", "दुनिया", "हिन्दी", "भाषा", "संस्कृत", "१२३", "क्षत्रिय", "ज्ञान"};
const char* const kOtherScripts[] = {
    "สวัสดี", "ชาวโลก", "ภาษาไทย", "๑๒๓", "Բարեւ", "გამარჯობა", "வணக்கம்", "ሰላም", "ᚠᚢᚦ",
    "ꯃꯅꯤꯄꯨꯔ", "ᠮᠣᠩᠭᠣᠯ", "ລາວ"};
const char* const kEmoji[] = {
    "😀", "😂", "🤣", "❤️", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "1️⃣", "🤷‍♀️",
    "🧑🏿‍💻", "✨", "🔥", "💯", "🐍", "☕", "⌚", "©", "™", "🫠", "🪿"};
const char* const kContractions[] = {
    "it's", "IT'S", "It'S", "don't", "DON'T", "we're", "WE'RE", "I've", "I'M", "I'm", "you'll",
    "YOU'LL", "he'd", "HE'D", "’s", "it’s", "rock'n'roll", "y'all'd've", "''s", "'s'", "' s",
    "'", "''", "'''", "o'clock", "ma'am", "'tis", "'Twas", "‘quoted’", "\"q\"", " 's", "'ll've",
    "'re're", "'d'd", "'S", "'T", "'M", "'D", "'LL", "'Ll", "'lL", "'RE", "'Re", "'VE", "'ve",
    "'re", "'m", "'t", "'d", "'ll", "'s", "'x", "'1", "' ", "'\n", "O'Neil's", "’S", "`s",
    "<|endoftext|>", "'sss", "'tt"};
const char* const kWhitespace[] = {
    " ", "  ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n", "   \n", " \t ",
    "\u00A0", "\u3000", "\u2028", "\u2029", "\uFEFF", "\u0085", "\v", "\f", "\u1680", "\u2000",
    "\u2009", "\u200A", "\u202F", "\u205F", "\u200B", "\u180E", " \u00A0", "\u00A0 ", "\r",
    " \r\n "};
const char* const kCjkPunctuation[] = {"，", "。", "、", "！", "？", "「", "」", " "};
const char* const kContractionGlue[] = {" ", "", "", "\n", ".", "!", " '", "s"};
const char* const kShortTokens[] = {"word", "Word", "WORD", "123", "!", "?!", "...", "a", "I",
                                    "42nd", "x2", "(", ")", "—", "-", "’", "\"", "é", "ß"};

// Code-point ranges the random segments draw from: every class, many scripts, astral planes,
// private use and unassigned code points, and letters assigned in Unicode 15.1, 16.0 and 17.0.
const std::pair<int32_t, int32_t> kRanges[] = {
    {0x20, 0x7E},       {0xA0, 0xFF},       {0x100, 0x24F},     {0x300, 0x36F},
    {0x370, 0x3FF},     {0x400, 0x4FF},     {0x530, 0x58F},     {0x590, 0x5FF},
    {0x600, 0x6FF},     {0x700, 0x7FF},     {0x900, 0x97F},     {0x980, 0x9FF},
    {0xE00, 0xE7F},     {0x1100, 0x11FF},   {0x1680, 0x169F},   {0x1E00, 0x1EFF},
    {0x1F00, 0x1FFF},   {0x2000, 0x206F},   {0x2070, 0x209F},   {0x20A0, 0x20FF},
    {0x2100, 0x218F},   {0x2190, 0x22FF},   {0x2460, 0x24FF},   {0x2500, 0x27FF},
    {0x2C00, 0x2E7F},   {0x3000, 0x30FF},   {0x3100, 0x33FF},   {0x4DC0, 0x4DFF},
    {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},   {0xA500, 0xABFF},   {0xAC00, 0xD7FF},
    {0xE000, 0xE0FF},   {0xF900, 0xFAFF},   {0xFB00, 0xFDFF},   {0xFE00, 0xFE6F},
    {0xFE70, 0xFFFF},   {0x10000, 0x1007F}, {0x10300, 0x1034F}, {0x10400, 0x1044F},
    {0x10A00, 0x10A5F}, {0x11000, 0x1107F}, {0x16A40, 0x16AFF}, {0x1D400, 0x1D7FF},
    {0x1E900, 0x1E95F}, {0x1F100, 0x1F1FF}, {0x1F300, 0x1F6FF}, {0x1F900, 0x1FAFF},
    {0x20000, 0x2A6DF}, {0x2B740, 0x2CEAF}, {0x30000, 0x3134F}, {0xE0000, 0xE007F},
    {0xF0000, 0xF00FF}, {0x10FFF0, 0x10FFFF},
    // Unicode 15.1: CJK Extension I.
    {0x2EBF0, 0x2EE5D},
    // Unicode 16.0: Todhri, Garay, Tulu-Tigalari, Sunuwar, Kirat Rai, Ol Onal, legacy computing.
    {0x105C0, 0x105FF}, {0x10D40, 0x10D8F}, {0x11380, 0x113FF}, {0x11BC0, 0x11BFF},
    {0x16D40, 0x16D7F}, {0x1E5D0, 0x1E5FF}, {0x1CC00, 0x1CEBF},
    // Unicode 17.0: Sidetic, Tolong Siki, Beria Erfe, Tai Yo, CJK Extension J.
    {0x10940, 0x1095F}, {0x11DB0, 0x11DEF}, {0x16EA0, 0x16EDF}, {0x1E6C0, 0x1E6FF},
    {0x323B0, 0x3347F},
};
// clang-format on

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  std::string Run(size_t bytes) {
    while (out_.size() < bytes) {
      switch (U(10)) {
        case 0:
          Code();
          break;
        case 1:
          Numbers();
          break;
        case 2:
          Scripts();
          break;
        case 3:
          Emoji();
          break;
        case 4:
          Combining();
          break;
        case 5:
          Whitespace();
          break;
        case 6:
          Contractions();
          break;
        case 7:
          Controls();
          break;
        case 8:
          RandomCodePoints();
          break;
        default:
          Cjk();
          break;
      }
      Put(Pick(kWhitespace));
    }
    out_ += "  \t  ";  // Trailing whitespace at the very end: \s+(?!\S) at end of input.
    return std::move(out_);
  }

 private:
  // Raw engine output only: std:: distributions differ between standard libraries.
  uint32_t U(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }
  template <size_t N>
  const char* Pick(const char* const (&pool)[N]) {
    return pool[U(N)];
  }
  void Put(const char* s) { out_ += s; }
  void Cp(int32_t cp) { internal::AppendUtf8(cp, &out_); }
  std::string Num() {
    switch (U(6)) {
      case 0:
        return std::to_string(U(10));
      case 1:
        return std::to_string(rng_());
      case 2:
        return absl::StrCat(U(1000), ".", U(100000));
      case 3:
        return absl::StrCat("-", U(100), ".", U(10), "e-", U(300));
      case 4:
        return absl::StrCat("0x", absl::Hex(rng_()));
      default:
        return std::to_string(static_cast<uint64_t>(rng_()) * rng_());
    }
  }

  void Code() {
    const char* nl = U(3) == 0 ? "\r\n" : "\n";
    const char* indent = U(2) == 0 ? "\t" : (U(2) == 0 ? "    " : "  ");
    const std::string a = Pick(kIdentifiers), b = Pick(kIdentifiers), c = Pick(kIdentifiers);
    switch (U(4)) {
      case 0:
        out_ += absl::StrCat("def ", a, "(", b, ", ", c, "=", Num(), "):", nl, indent, "\"\"\"",
                             Pick(kContractions), " doc.\"\"\"", nl, indent, "return ", b, " * ", c,
                             "  # ", Pick(kShortTokens), nl);
        break;
      case 1:
        out_ += absl::StrCat("for (int ", a, " = 0; ", a, " < ", Num(), "; ++", a, ") {", nl,
                             indent, b, "[", a, "] += ", c, "->", a, "(\"str\\n\\t\", '\\'');",
                             U(2) ? "   " : "", nl, "}", nl);
        break;
      case 2:
        out_ += absl::StrCat("{\"", a, "\": [", Num(), ", ", Num(), ", true, null], \"", b,
                             "\": {\"", c, "\": \"", Pick(kCyrillic), "\"}},", nl);
        break;
      default:
        out_ += absl::StrCat("#include <", a, ".h>", nl, "std::", b, "<", c, "> v{", Num(),
                             "};  // TODO(", a, "): ", Pick(kShortTokens), "!!", nl, nl);
        break;
    }
  }

  void Numbers() {
    for (int k = 0, n = 3 + U(10); k < n; ++k) {
      switch (U(8)) {
        case 0:
          out_ += absl::StrCat(U(1000), ",", 100 + U(900), ",", 100 + U(900));
          break;
        case 1:
          out_ += absl::StrCat("20", 10 + U(90), "-", 1 + U(12), "-", 1 + U(28));
          break;
        case 2:
          out_ += absl::StrCat(U(24), ":", U(60), ":", U(60));
          break;
        case 3:
          out_ += absl::StrCat("v", U(10), ".", U(20), ".", U(100));
          break;
        case 4:
          out_ += absl::StrCat("$", U(10000), ".", U(100), " (", U(100), "%)");
          break;
        case 5:
          out_ += absl::StrCat("+1 (", 200 + U(800), ") ", U(1000), "-", U(10000));
          break;
        case 6:
          out_ += absl::StrCat(1 + U(30), Pick(kShortTokens));
          break;
        default:
          out_ += Num();
          break;
      }
      Put(U(4) ? " " : ", ");
    }
  }

  void Scripts() {
    static const std::vector<std::pair<const char* const*, size_t>> pools = {
        {kCyrillic, std::size(kCyrillic)},     {kGreek, std::size(kGreek)},
        {kArabic, std::size(kArabic)},         {kHebrew, std::size(kHebrew)},
        {kDevanagari, std::size(kDevanagari)}, {kOtherScripts, std::size(kOtherScripts)}};
    const auto& [pool, size] = pools[U(pools.size())];
    for (int k = 0, n = 3 + U(12); k < n; ++k) {
      Put(pool[U(size)]);
      Put(U(5) ? " " : (U(2) ? ", " : ". "));
    }
  }

  void Cjk() {
    for (int k = 0, n = 5 + U(40); k < n; ++k) {
      switch (U(6)) {
        case 0:
          Cp(0x3041 + U(0x56));
          break;  // Hiragana.
        case 1:
          Cp(0x30A1 + U(0x5A));
          break;  // Katakana.
        case 2:
          Cp(0xAC00 + U(11172));
          break;  // Hangul syllables.
        default:
          Cp(0x4E00 + U(0x5200));
          break;
      }
      if (U(8) == 0) Put(Pick(kCjkPunctuation));
    }
  }

  void Emoji() {
    for (int k = 0, n = 1 + U(8); k < n; ++k) {
      Put(Pick(kEmoji));
      if (U(3) == 0) Put(U(2) ? " " : Pick(kShortTokens));
    }
  }

  void Combining() {
    for (int k = 0, n = 1 + U(6); k < n; ++k) {
      Put(Pick(kShortTokens));
      for (int m = 0, marks = 1 + U(U(4) == 0 ? 10 : 3); m < marks; ++m) {
        Cp(U(4) ? 0x300 + U(0x70) : 0x20D0 + U(0x21));
      }
      if (U(2)) Put(" ");
    }
    Put(U(2) ? "e\u0301 vs \u00E9, \u1100\u1161\u11A8" : "Zal\u0336\u0353go\u0489\u0489");
  }

  void Whitespace() {
    for (int k = 0, n = 4 + U(16); k < n; ++k) {
      Put(Pick(kWhitespace));
      Put(Pick(kShortTokens));
    }
  }

  void Contractions() {
    for (int k = 0, n = 4 + U(12); k < n; ++k) {
      Put(Pick(kContractions));
      Put(Pick(kContractionGlue));
    }
  }

  void Controls() {
    for (int k = 0, n = 2 + U(8); k < n; ++k) {
      Put(Pick(kShortTokens));
      const uint32_t r = U(3);
      Cp(r == 0 ? static_cast<int32_t>(U(0x20)) : (r == 1 ? 0x7F : 0x80 + U(0x20)));
    }
  }

  void RandomCodePoints() {
    for (int k = 0, n = 5 + U(40); k < n; ++k) {
      const auto& [lo, hi] = kRanges[U(std::size(kRanges))];
      const int32_t cp = lo + static_cast<int32_t>(U(hi - lo + 1));
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      Cp(cp);
      if (U(6) == 0) Put(Pick(kWhitespace));
    }
  }

  std::mt19937 rng_;
  std::string out_;
};

}  // namespace

absl::StatusOr<std::string> FortunesProse(size_t max_bytes) {
  DIR* dir = opendir(kFortunesDir);
  if (dir == nullptr) {
    return absl::NotFoundError(absl::StrCat(kFortunesDir, " not found; run ./bazelw ",
                                            "(tools/setup.sh) to install Debian's fortunes"));
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name[0] == '.' || name.find('.') != std::string::npos) continue;  // .dat, .u8
    names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  std::string text;
  for (const std::string& name : names) {
    std::ifstream in(absl::StrCat(kFortunesDir, "/", name), std::ios::binary);
    if (!in) continue;  // A directory (e.g. off/) or unreadable.
    std::ostringstream ss;
    ss << in.rdbuf();
    text += ss.str();
    if (text.size() >= max_bytes) break;
  }
  if (text.size() > max_bytes) {
    const size_t cut = text.rfind('\n', max_bytes);
    text.resize(cut == std::string::npos ? 0 : cut + 1);
  }
  if (text.empty()) return absl::NotFoundError(absl::StrCat("no fortune files in ", kFortunesDir));
  return text;
}

std::string GeneratedText(size_t bytes, uint32_t seed) { return Generator(seed).Run(bytes); }

absl::StatusOr<std::string> VariedText(size_t prose_bytes, size_t generated_bytes, uint32_t seed) {
  absl::StatusOr<std::string> prose = FortunesProse(prose_bytes);
  if (!prose.ok()) return prose.status();
  return *prose + GeneratedText(generated_bytes, seed);
}

}  // namespace mt::data::testing
