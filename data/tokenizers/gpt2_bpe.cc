#include "data/tokenizers/gpt2_bpe.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "data/tokenizers/assets.h"
#include "data/tokenizers/utf8.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace mt::data {
namespace {

using internal::DecodeUtf8;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return std::move(ss).str();
}

// GPT-2's bytes_to_unicode(): the code point that spells each byte in encoder.json / vocab.bpe.
// Printable Latin-1 bytes spell themselves; the other 68 map to U+0100.. in byte order.
std::array<int32_t, 256> ByteSpelling() {
  std::array<int32_t, 256> cp{};
  int32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    cp[b] = printable ? b : next++;
  }
  return cp;
}

// Raw bytes of a token spelled with ByteSpelling(); false if a character spells no byte.
bool SpelledToBytes(absl::string_view spelled, const std::vector<int16_t>& byte_of_cp,
                    std::string* bytes) {
  bytes->clear();
  const auto* p = reinterpret_cast<const unsigned char*>(spelled.data());
  const auto* end = p + spelled.size();
  while (p < end) {
    int len;
    const int32_t cp = DecodeUtf8(p, end, &len);
    if (cp < 0 || cp >= static_cast<int32_t>(byte_of_cp.size()) || byte_of_cp[cp] < 0) {
      return false;
    }
    bytes->push_back(static_cast<char>(byte_of_cp[cp]));
    p += len;
  }
  return true;
}

inline uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Length of a contraction ('s 't 're 've 'm 'll 'd, case-sensitive) at p, or 0.
inline size_t ContractionLength(const unsigned char* p, const unsigned char* end) {
  if (end - p < 2) return 0;
  switch (p[1]) {
    case 's':
    case 't':
    case 'm':
    case 'd':
      return 2;
    case 'r':
    case 'v':
      return (end - p >= 3 && p[2] == 'e') ? 3 : 0;
    case 'l':
      return (end - p >= 3 && p[2] == 'l') ? 3 : 0;
    default:
      return 0;
  }
}

// encoder.json: {"<spelled token>": id, ...} with ids 0..N-1, each token spelled in GPT-2's byte
// alphabet (`spelling`).
struct Encoder {
  std::vector<std::string> token_bytes;                  // [N] raw bytes of each id
  absl::flat_hash_map<std::string, int32_t> spelled_id;  // spelled token -> id
};

absl::StatusOr<Encoder> ReadEncoder(const std::string& encoder_json,
                                    const std::array<int32_t, 256>& spelling) {
  std::vector<int16_t> byte_of_cp(324, -1);
  for (int b = 0; b < 256; ++b) byte_of_cp[spelling[b]] = static_cast<int16_t>(b);
  ASSIGN_OR_RETURN(std::string json_text, ReadFile(encoder_json));
  const nlohmann::json encoder =
      nlohmann::json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (encoder.is_discarded() || !encoder.is_object() || encoder.empty()) {
    return absl::DataLossError(absl::StrCat(encoder_json, ": not a JSON object of token -> id"));
  }
  const int64_t n = static_cast<int64_t>(encoder.size());
  if (n >= std::numeric_limits<int32_t>::max()) {
    return absl::DataLossError(absl::StrCat(encoder_json, ": too many tokens"));
  }
  Encoder out;
  out.spelled_id.reserve(n);
  out.token_bytes.assign(n, std::string());
  std::vector<bool> seen(n, false);
  std::string bytes;
  for (const auto& item : encoder.items()) {
    const nlohmann::json& value = item.value();
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= n ||
        seen[value.get<int64_t>()]) {
      return absl::DataLossError(absl::StrCat(encoder_json, ": token ", item.key(),
                                              " has an id that is not unique in [0, ", n, ")"));
    }
    const int32_t id = static_cast<int32_t>(value.get<int64_t>());
    seen[id] = true;
    if (!SpelledToBytes(item.key(), byte_of_cp, &bytes)) {
      return absl::DataLossError(
          absl::StrCat(encoder_json, ": token ", id, " is not spelled with GPT-2's byte alphabet"));
    }
    out.token_bytes[id] = bytes;
    out.spelled_id.emplace(item.key(), id);
  }
  return out;
}

// vocab.bpe: a version line, then one merge "A B" per line, in rank order. Like the reference,
// the first and the last line (empty when the file ends with a newline) are not merges. Returns
// the reference's rank table, keyed by "A,B": later lines overwrite earlier ones.
absl::StatusOr<absl::flat_hash_map<std::string, int32_t>> ReadMergeRanks(
    const std::string& vocab_bpe, const std::string& encoder_json, const Encoder& encoder) {
  ASSIGN_OR_RETURN(std::string merges_text, ReadFile(vocab_bpe));
  std::vector<absl::string_view> lines = absl::StrSplit(merges_text, '\n');
  absl::flat_hash_map<std::string, int32_t> key_rank;
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    // ECMAScript \s restricted to ASCII: a well-formed line has no other whitespace.
    std::vector<absl::string_view> f =
        absl::StrSplit(lines[i], absl::ByAnyChar(" \t\r\v\f"), absl::SkipEmpty());
    const int rank = static_cast<int>(i - 1);
    if (f.size() != 2) {
      return absl::DataLossError(
          absl::StrCat(vocab_bpe, ":", i + 1, ": expected two tokens separated by a space"));
    }
    for (const std::string& t : {std::string(f[0]), std::string(f[1]), absl::StrCat(f[0], f[1])}) {
      if (!encoder.spelled_id.contains(t)) {
        return absl::DataLossError(absl::StrCat(vocab_bpe, ":", i + 1, ": '", t, "' is not in ",
                                                encoder_json, "; the two files do not match"));
      }
    }
    key_rank[absl::StrCat(f[0], ",", f[1])] = rank;
  }
  return key_rank;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Gpt2Bpe>> Gpt2Bpe::Load(const std::string& encoder_json,
                                                       const std::string& vocab_bpe,
                                                       const std::string& js_classes) {
  ASSIGN_OR_RETURN(JsCharClasses classes, JsCharClasses::Load(js_classes));
  std::unique_ptr<Gpt2Bpe> bpe(new Gpt2Bpe(std::move(classes)));

  const std::array<int32_t, 256> spelling = ByteSpelling();
  ASSIGN_OR_RETURN(Encoder encoder, ReadEncoder(encoder_json, spelling));
  const absl::flat_hash_map<std::string, int32_t>& spelled_id = encoder.spelled_id;
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    internal::AppendUtf8(spelling[b], &spelled);
    auto it = spelled_id.find(spelled);
    if (it == spelled_id.end()) {
      return absl::DataLossError(absl::StrCat(encoder_json, ": no single-byte token for byte ", b));
    }
    bpe->byte_id_[b] = it->second;
  }
  if (auto it = spelled_id.find("<|endoftext|>"); it != spelled_id.end()) bpe->eod_ = it->second;

  ASSIGN_OR_RETURN(const auto key_rank, ReadMergeRanks(vocab_bpe, encoder_json, encoder));
  // Every split of a key at a comma into two tokens is a pair the reference merges at that rank.
  for (const auto& [key, rank] : key_rank) {
    for (size_t p = key.find(','); p != std::string::npos; p = key.find(',', p + 1)) {
      auto left = spelled_id.find(absl::string_view(key).substr(0, p));
      auto right = spelled_id.find(absl::string_view(key).substr(p + 1));
      if (p == 0 || p + 1 == key.size() || left == spelled_id.end() || right == spelled_id.end()) {
        continue;
      }
      auto merged = spelled_id.find(absl::StrCat(left->first, right->first));
      if (merged == spelled_id.end()) {
        return absl::DataLossError(absl::StrCat(
            vocab_bpe, ": the reference would merge '", left->first, "' and '", right->first,
            "' (their rank key collides with merge '", key, "') into a token ", encoder_json,
            " lacks; this vocabulary is not supported"));
      }
      bpe->merges_[PairKey(left->second, right->second)] = Merge{rank, merged->second};
    }
  }
  bpe->token_bytes_ = std::move(encoder.token_bytes);
  return bpe;
}

absl::StatusOr<std::unique_ptr<Gpt2Bpe>> Gpt2Bpe::LoadDefault() {
  ASSIGN_OR_RETURN(std::string encoder_json, Gpt2EncoderJson());
  ASSIGN_OR_RETURN(std::string vocab_bpe, Gpt2VocabBpe());
  ASSIGN_OR_RETURN(std::string js_classes, JsUnicodeClasses());
  return Load(encoder_json, vocab_bpe, js_classes);
}

SpecialTokens Gpt2Bpe::special_tokens() const {
  SpecialTokens s;
  s.eod = eod_;
  return s;
}

absl::string_view Gpt2Bpe::token_bytes(int32_t id) const {
  CHECK(id >= 0 && id < vocab_size()) << "token id " << id << " out of range";
  return token_bytes_[id];
}

// The regex's alternatives, tried in order at each position; every character falls in exactly
// one of the classes letter / number / space / other, so the matches tile the text.
template <typename Emit>
void Gpt2Bpe::Split(absl::string_view text, Emit&& emit) const {
  const auto* const begin = reinterpret_cast<const unsigned char*>(text.data());
  const auto* const end = begin + text.size();
  const auto* p = begin;
  auto class_at = [&](const unsigned char* q, int* len) {
    return classes_.Of(DecodeUtf8(q, end, len));
  };
  while (p < end) {
    const unsigned char* start = p;
    if (*p == '\'') {  // 's|'t|'re|'ve|'m|'ll|'d
      if (size_t m = ContractionLength(p, end)) {
        emit(start - begin, start + m - begin);
        p += m;
        continue;
      }
    }
    int len;
    JsCharClass c = class_at(p, &len);
    p += len;
    if (*start == ' ' && p < end) {  // ' ?' before a letter, number or other run.
      int next_len;
      const JsCharClass next = class_at(p, &next_len);
      if (next != JsCharClass::kSpace) {
        c = next;
        p += next_len;
      }
    }
    if (c != JsCharClass::kSpace) {  // \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+
      while (p < end && class_at(p, &len) == c) p += len;
      emit(start - begin, p - begin);
      continue;
    }
    // \s+(?!\S) takes a whitespace run that ends the text, or else all of it but its last
    // character (which then starts the next match); a single whitespace character before a
    // non-space falls through to \s+.
    const unsigned char* last = start;
    while (p < end && class_at(p, &len) == JsCharClass::kSpace) {
      last = p;
      p += len;
    }
    if (p < end && last != start) p = last;
    emit(start - begin, p - begin);
  }
}

std::vector<absl::string_view> Gpt2Bpe::PreTokenize(absl::string_view text) const {
  std::vector<absl::string_view> pieces;
  Split(text, [&](size_t b, size_t e) { pieces.push_back(text.substr(b, e - b)); });
  return pieces;
}

void Gpt2Bpe::BpeWord(absl::string_view word, std::vector<int32_t>* ids) const {
  if (word.size() == 1) {
    ids->push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  CacheShard& shard = cache_[absl::Hash<absl::string_view>{}(word) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  absl::InlinedVector<int32_t, 32> sym;
  for (char b : word) sym.push_back(byte_id_[static_cast<unsigned char>(b)]);
  while (sym.size() > 1) {
    // The lowest-ranked pair; on equal ranks the rightmost, as in the reference.
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    int32_t left = 0, right = 0, merged = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = merges_.find(PairKey(sym[i], sym[i + 1]));
      if (it != merges_.end() && it->second.rank <= best_rank) {
        best_rank = it->second.rank;
        left = sym[i];
        right = sym[i + 1];
        merged = it->second.merged;
      }
    }
    if (best_rank == std::numeric_limits<int32_t>::max()) break;
    size_t w = 0;
    for (size_t r = 0; r < sym.size();) {
      if (r + 1 < sym.size() && sym[r] == left && sym[r + 1] == right) {
        sym[w++] = merged;
        r += 2;
      } else {
        sym[w++] = sym[r++];
      }
    }
    sym.resize(w);
  }
  ids->insert(ids->end(), sym.begin(), sym.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.words.size() >= kMaxWordsPerShard) shard.words.clear();
  shard.words.emplace(word, std::vector<int32_t>(sym.begin(), sym.end()));
}

void Gpt2Bpe::EncodeAppend(absl::string_view text, std::vector<int32_t>* ids) const {
  Split(text, [&](size_t b, size_t e) { BpeWord(text.substr(b, e - b), ids); });
}

absl::StatusOr<std::string> Gpt2Bpe::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("gpt2 Decode: id ", ids[i], " at position ", i,
                                                     " is outside [0, ", vocab_size(), ")"));
    }
    out += token_bytes_[ids[i]];
  }
  return out;
}

}  // namespace mt::data
