#include "data/tokenizers/wordpiece.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "data/tokenizers/assets.h"
#include "data/tokenizers/utf8.h"
#include "glog/logging.h"

namespace mt::data {
namespace {

using internal::AppendUtf8;
using internal::DecodeUtf8;
using internal::kInvalidCodePoint;

bool IsControl(int32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  if (cp < 0x80) return cp < 0x20 || cp == 0x7F;
  const int8_t t = u_charType(cp);
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR;
}

bool IsWhitespace(int32_t cp) {
  if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
  if (cp < 0x80) return false;
  return u_charType(cp) == U_SPACE_SEPARATOR;
}

// BERT's "Chinese character" blocks (CJK Unified Ideographs and extensions, compatibility
// ideographs); Hiragana, Katakana and Hangul are not in it.
bool IsCjk(int32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool IsPunctuation(int32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126)) {
    return true;
  }
  if (cp < 0x80) return false;
  return (U_GET_GC_MASK(cp) & U_GC_P_MASK) != 0;
}

// Lower-cases (full mapping, root locale), decomposes (NFD) and drops non-spacing marks.
// `word` holds the code points of one whitespace-separated word, not all ASCII.
std::vector<int32_t> LowerStripAccents(const std::vector<int32_t>& word) {
  std::u16string utf16;
  for (int32_t cp : word) {
    if (cp < 0x10000) {
      utf16.push_back(static_cast<char16_t>(cp));
    } else {
      utf16.push_back(static_cast<char16_t>(U16_LEAD(cp)));
      utf16.push_back(static_cast<char16_t>(U16_TRAIL(cp)));
    }
  }
  auto icu_call = [](std::u16string* out, auto&& fn) {
    UErrorCode err = U_ZERO_ERROR;
    int32_t n = fn(out->data(), static_cast<int32_t>(out->size()), &err);
    if (err == U_BUFFER_OVERFLOW_ERROR) {
      out->resize(n);
      err = U_ZERO_ERROR;
      n = fn(out->data(), static_cast<int32_t>(out->size()), &err);
    }
    CHECK(U_SUCCESS(err)) << "ICU: " << u_errorName(err);
    out->resize(n);
  };
  std::u16string lower(utf16.size() + 8, u'\0');
  icu_call(&lower, [&](UChar* dst, int32_t cap, UErrorCode* err) {
    return u_strToLower(dst, cap, utf16.data(), static_cast<int32_t>(utf16.size()), "", err);
  });
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
  CHECK(U_SUCCESS(err)) << "ICU NFD: " << u_errorName(err);
  std::u16string decomposed(lower.size() * 2 + 8, u'\0');
  icu_call(&decomposed, [&](UChar* dst, int32_t cap, UErrorCode* e) {
    return unorm2_normalize(nfd, lower.data(), static_cast<int32_t>(lower.size()), dst, cap, e);
  });
  std::vector<int32_t> out;
  out.reserve(decomposed.size());
  const int32_t n = static_cast<int32_t>(decomposed.size());
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U16_NEXT(decomposed.data(), i, n, c);
    if (u_charType(c) != U_NON_SPACING_MARK) out.push_back(c);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WordPiece>> WordPiece::Load(const std::string& vocab_txt) {
  std::ifstream in(vocab_txt, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", vocab_txt));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = std::move(ss).str();
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return absl::DataLossError(absl::StrCat(vocab_txt, ": empty vocabulary"));

  std::unique_ptr<WordPiece> wp(new WordPiece());
  wp->tokens_.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    // Like BERT's load_vocab: surrounding whitespace is stripped, later duplicates win.
    std::string token(absl::StripAsciiWhitespace(lines[i]));
    const int32_t id = static_cast<int32_t>(i);
    if (token.size() > 2 && token.compare(0, 2, "##") == 0) {
      wp->continuation_[token.substr(2)] = id;
      wp->max_piece_bytes_ = std::max(wp->max_piece_bytes_, token.size() - 2);
    } else {
      wp->word_start_[token] = id;
      wp->max_piece_bytes_ = std::max(wp->max_piece_bytes_, token.size());
    }
    wp->tokens_.push_back(std::move(token));
  }
  for (auto [name, field] :
       {std::pair{"[PAD]", &SpecialTokens::pad}, std::pair{"[UNK]", &SpecialTokens::unk},
        std::pair{"[CLS]", &SpecialTokens::cls}, std::pair{"[SEP]", &SpecialTokens::sep},
        std::pair{"[MASK]", &SpecialTokens::mask}}) {
    const int32_t id = wp->TokenId(name);
    if (id == kNoToken) {
      return absl::DataLossError(absl::StrCat(vocab_txt, ": no ", name, " token"));
    }
    wp->special_.*field = id;
  }
  return wp;
}

absl::StatusOr<std::unique_ptr<WordPiece>> WordPiece::LoadDefault() {
  ASSIGN_OR_RETURN(std::string vocab_txt, BertVocabTxt());
  return Load(vocab_txt);
}

const std::string& WordPiece::token(int32_t id) const {
  CHECK(id >= 0 && id < vocab_size()) << "token id " << id << " out of range";
  return tokens_[id];
}

int32_t WordPiece::TokenId(absl::string_view token) const {
  if (token.size() > 2 && token.substr(0, 2) == "##") {
    auto it = continuation_.find(token.substr(2));
    return it == continuation_.end() ? kNoToken : it->second;
  }
  auto it = word_start_.find(token);
  return it == word_start_.end() ? kNoToken : it->second;
}

template <typename Emit>
void WordPiece::Basic(absl::string_view text, Emit&& emit) const {
  std::vector<int32_t> word;  // Code points of the current whitespace-separated word.
  bool ascii = true;
  std::string piece;
  auto finish_word = [&]() {
    if (word.empty()) return;
    if (ascii) {
      for (int32_t& cp : word) {
        if (cp >= 'A' && cp <= 'Z') cp += 'a' - 'A';
      }
    } else {
      word = LowerStripAccents(word);
    }
    piece.clear();
    for (int32_t cp : word) {
      if (IsPunctuation(cp)) {
        if (!piece.empty()) emit(absl::string_view(piece));
        piece.clear();
        AppendUtf8(cp, &piece);
        emit(absl::string_view(piece));
        piece.clear();
      } else {
        AppendUtf8(cp, &piece);
      }
    }
    if (!piece.empty()) emit(absl::string_view(piece));
    word.clear();
    ascii = true;
  };

  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* const end = p + text.size();
  while (p < end) {
    int len;
    const int32_t cp = DecodeUtf8(p, end, &len);
    p += len;
    if (cp == kInvalidCodePoint || cp == 0 || cp == 0xFFFD || IsControl(cp)) continue;
    if (IsWhitespace(cp) || cp == 0x2028 || cp == 0x2029) {
      finish_word();
    } else if (IsCjk(cp)) {
      finish_word();
      word.push_back(cp);
      ascii = false;
      finish_word();
    } else {
      word.push_back(cp);
      ascii = ascii && cp < 0x80;
    }
  }
  finish_word();
}

std::vector<std::string> WordPiece::BasicTokenize(absl::string_view text) const {
  std::vector<std::string> words;
  Basic(text, [&](absl::string_view w) { words.emplace_back(w); });
  return words;
}

void WordPiece::WordPieceWord(absl::string_view word, std::vector<int32_t>* ids) const {
  // Byte offsets of the code points, plus the end.
  absl::InlinedVector<uint32_t, 64> bounds;
  for (size_t i = 0; i < word.size(); ++i) {
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) bounds.push_back(i);
  }
  const size_t num_chars = bounds.size();
  bounds.push_back(static_cast<uint32_t>(word.size()));
  if (num_chars == 0) return;
  if (num_chars > static_cast<size_t>(kMaxCharsPerWord)) {
    ids->push_back(special_.unk);
    return;
  }
  const size_t first_out = ids->size();
  size_t start = 0;
  while (start < num_chars) {
    const auto& table = start == 0 ? word_start_ : continuation_;
    size_t end = num_chars;
    while (end > start && bounds[end] - bounds[start] > max_piece_bytes_) --end;
    int32_t id = kNoToken;
    for (; end > start; --end) {
      auto it = table.find(word.substr(bounds[start], bounds[end] - bounds[start]));
      if (it != table.end()) {
        id = it->second;
        break;
      }
    }
    if (id == kNoToken) {  // Some part cannot be covered: the whole word is [UNK].
      ids->resize(first_out);
      ids->push_back(special_.unk);
      return;
    }
    ids->push_back(id);
    start = end;
  }
}

void WordPiece::EncodeAppend(absl::string_view text, std::vector<int32_t>* ids) const {
  Basic(text, [&](absl::string_view w) { WordPieceWord(w, ids); });
}

absl::StatusOr<std::string> WordPiece::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("bert Decode: id ", ids[i], " at position ", i,
                                                     " is outside [0, ", vocab_size(), ")"));
    }
    const std::string& t = tokens_[ids[i]];
    if (i > 0 && t.size() >= 2 && t.compare(0, 2, "##") == 0) {
      out.append(t, 2, std::string::npos);
    } else {
      if (i > 0) out.push_back(' ');
      out += t;
    }
  }
  return out;
}

}  // namespace mt::data
