#include "experiments/common/prose_corpus.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <unordered_set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/file_system.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "data/preprocessing/default_data.h"
#include "data/preprocessing/preprocess.h"
#include "data/tokenizers/factory.h"
#include "experiments/common/report.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace experiments {
namespace {

// Bump when the documents or their tokenisation change.
constexpr int kProseCorpusVersion = 1;

std::vector<std::string> Lines(absl::string_view text) { return absl::StrSplit(text, '\n'); }

std::string Collapse(absl::string_view text) {
  std::vector<absl::string_view> words =
      absl::StrSplit(text, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty());
  return absl::StrJoin(words, " ");
}

int64_t WordCount(absl::string_view text) {
  return static_cast<int64_t>(
      std::vector<absl::string_view>(absl::StrSplit(text, ' ', absl::SkipEmpty())).size());
}

// "  12 text" -> true (a verse's first line).
bool IsVerseStart(absl::string_view line) {
  const size_t i = line.find_first_not_of(' ');
  if (i == 0 || i == absl::string_view::npos || !absl::ascii_isdigit(line[i])) return false;
  const size_t j = line.find_first_not_of("0123456789", i);
  return j != absl::string_view::npos && line[j] == ' ';
}

// FNV-1a, 64 bits: the stamp's digest of the training text (stable across runs and builds).
uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string ShingleKey(const std::vector<std::string>& w, size_t i, int n) {
  std::string key;
  for (int k = 0; k < n; ++k) absl::StrAppend(&key, w[i + k], " ");
  return key;
}

absl::StatusOr<std::vector<ProseDocument>> ReadSources(const ProseCorpusConfig& c,
                                                       std::vector<std::string>* described) {
  std::vector<ProseDocument> docs;
  auto add = [&](const std::string& source, const std::vector<std::string>& texts) {
    for (const std::string& t : texts) docs.push_back({source, t});
    described->push_back(absl::StrFormat("%s (%d documents)", source, texts.size()));
  };
  if (!c.fortunes_dir.empty()) {
    ASSIGN_OR_RETURN(std::vector<std::string> files, data::ListCorpusFiles(c.fortunes_dir));
    std::vector<std::string> texts;
    for (const std::string& f : files) {
      ASSIGN_OR_RETURN(std::string text, DefaultFileSystem().ReadFile(f));
      for (std::string& d : SplitFortunes(text)) texts.push_back(std::move(d));
    }
    add("fortunes", texts);
  }
  if (!c.bible_program.empty()) {
    if (FindOnPath(c.bible_program).empty()) {
      return absl::NotFoundError(absl::StrCat(
          "the program ", c.bible_program,
          " is not installed; run ./bazelw once (tools/setup.sh installs the Debian package "
          "bible-kjv) or pass an empty path to leave the Bible out"));
    }
    ASSIGN_OR_RETURN(std::string text, RunCommand({c.bible_program, "-l200", "gen1:1-rev22:21"}, "",
                                                  Stderr::kDiscard));
    add("bible", SplitBible(text, kBibleDocumentWords));
  }
  if (!c.jargon_file.empty()) {
    if (!std::filesystem::exists(c.jargon_file)) {
      return absl::NotFoundError(absl::StrCat(
          c.jargon_file,
          " does not exist; run ./bazelw once (tools/setup.sh installs the Debian package "
          "jargon-text) or pass an empty path to leave the Jargon File out"));
    }
    ASSIGN_OR_RETURN(std::string text, RunCommand({"gzip", "-dc", c.jargon_file}));
    add("jargon", SplitJargon(text, 12));
  }
  return docs;
}

// Writes the training documents as jsonl and tokenises them for one family, unless the stamp
// says the dataset at `prefix` holds this text already.
absl::Status MakeDataset(const std::string& jsonl, uint64_t digest, const std::string& prefix,
                         absl::string_view tokenizer_name) {
  const std::string stamp =
      absl::StrCat("prose corpus v", kProseCorpusVersion, " ", tokenizer_name, " ", digest, "\n");
  FileSystem& fs = DefaultFileSystem();
  auto old = fs.ReadFile(prefix + ".stamp");
  if (old.ok() && *old == stamp && std::filesystem::exists(prefix + ".bin") &&
      std::filesystem::exists(prefix + ".idx")) {
    return absl::OkStatus();
  }
  std::printf("prose corpus: tokenising %s for %s\n", jsonl.c_str(),
              std::string(tokenizer_name).c_str());
  std::fflush(stdout);
  ASSIGN_OR_RETURN(auto tokenizer, data::CreateTokenizer(std::string(tokenizer_name)));
  data::PreprocessConfig p;
  p.inputs = {jsonl};
  p.output_prefix = prefix;
  p.append_eod = tokenizer_name == "gpt2";
  p.split_sentences = tokenizer_name == "bert";
  RETURN_IF_ERROR(data::Preprocess(p, *tokenizer).status());
  return WriteFile(prefix + ".stamp", stamp);
}

}  // namespace

std::vector<std::string> SplitFortunes(absl::string_view text) {
  std::vector<std::string> out;
  std::string current;
  for (const std::string& line : Lines(text)) {
    if (absl::StripTrailingAsciiWhitespace(line) == "%") {
      if (!Collapse(current).empty()) out.push_back(Collapse(current));
      current.clear();
    } else {
      absl::StrAppend(&current, line, "\n");
    }
  }
  if (!Collapse(current).empty()) out.push_back(Collapse(current));
  return out;
}

std::vector<std::string> SplitBible(absl::string_view text, int min_words) {
  std::vector<std::string> out;
  std::string doc, verse;
  bool chapter_has_docs = false;
  auto end_verse = [&] {
    if (!verse.empty()) absl::StrAppend(&doc, doc.empty() ? "" : " ", Collapse(verse));
    verse.clear();
    if (WordCount(doc) >= min_words) {
      out.push_back(doc);
      doc.clear();
      chapter_has_docs = true;
    }
  };
  auto end_chapter = [&] {
    end_verse();
    if (!doc.empty()) {  // A short tail joins the chapter's last document.
      if (chapter_has_docs) {
        absl::StrAppend(&out.back(), " ", doc);
      } else {
        out.push_back(doc);
      }
    }
    doc.clear();
    chapter_has_docs = false;
  };
  const std::vector<std::string> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const absl::string_view line = absl::StripTrailingAsciiWhitespace(lines[i]);
    if (line.empty()) continue;
    const bool alone = (i == 0 || absl::StripAsciiWhitespace(lines[i - 1]).empty()) &&
                       (i + 1 == lines.size() || absl::StripAsciiWhitespace(lines[i + 1]).empty());
    if (alone && line[0] != ' ') {  // "Genesis 2": a chapter heading.
      end_chapter();
    } else if (IsVerseStart(line)) {
      end_verse();
      absl::string_view v = absl::StripLeadingAsciiWhitespace(line);
      verse = std::string(v.substr(v.find(' ') + 1));
    } else {
      absl::StrAppend(&verse, " ", line);
    }
  }
  end_chapter();
  return out;
}

std::vector<std::string> SplitJargon(absl::string_view text, int min_words) {
  std::vector<std::string> out;
  bool in_entry = false;
  std::string para;
  auto end_para = [&] {
    std::string p = Collapse(para);
    para.clear();
    p.erase(std::remove_if(p.begin(), p.end(), [](char c) { return c == '{' || c == '}'; }),
            p.end());
    if (in_entry && WordCount(p) >= min_words) out.push_back(std::move(p));
  };
  for (const std::string& raw : Lines(text)) {
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty()) {
      end_para();
    } else if (line.size() > 2 && line[0] == ':' && line.find(':', 1) != absl::string_view::npos) {
      end_para();
      in_entry = true;  // The headword line itself is no prose.
    } else {
      absl::StrAppend(&para, line, " ");
    }
  }
  end_para();
  return out;
}

std::vector<std::string> NormalizedWords(absl::string_view text) {
  std::vector<std::string> out;
  std::string w;
  for (char c : text) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) {
      w.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    } else if (!w.empty()) {
      out.push_back(std::move(w));
      w.clear();
    }
  }
  if (!w.empty()) out.push_back(std::move(w));
  return out;
}

HeldOutSplit SplitHeldOut(std::vector<ProseDocument> docs, int every, uint64_t seed,
                          int dedup_words) {
  std::mt19937_64 rng(seed);
  for (size_t i = docs.size(); i > 1; --i) {
    std::swap(docs[i - 1], docs[static_cast<size_t>(rng() % i)]);
  }
  HeldOutSplit s;
  std::vector<ProseDocument> candidates;
  for (size_t i = 0; i < docs.size(); ++i) {
    (every > 0 && i % every == 0 ? candidates : s.train).push_back(std::move(docs[i]));
  }
  std::unordered_set<std::string> seen;
  auto shingles = [&](const std::string& text) {
    std::vector<std::string> w = NormalizedWords(text), keys;
    for (size_t i = 0; i + dedup_words <= w.size(); ++i) {
      keys.push_back(ShingleKey(w, i, dedup_words));
    }
    return keys;
  };
  for (const ProseDocument& d : s.train) {
    for (std::string& k : shingles(d.text)) seen.insert(std::move(k));
  }
  for (ProseDocument& d : candidates) {
    const std::vector<std::string> keys = shingles(d.text);
    const bool overlaps =
        std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return seen.count(k); });
    if (overlaps) {
      ++s.dropped_overlapping;
      continue;
    }
    seen.insert(keys.begin(), keys.end());
    s.heldout.push_back(std::move(d));
  }
  return s;
}

std::string ProseCorpus::Describe() const {
  return absl::StrFormat(
      "English prose from Debian packages: %s; shuffled, every 20th document held out, %d "
      "held-out documents dropped for sharing a %d-word run with the training text: %d "
      "training and %d held-out documents",
      absl::StrJoin(sources, ", "), dropped_overlapping, kDedupWords, train.size(), heldout.size());
}

absl::StatusOr<ProseCorpus> BuildProseCorpus(const ProseCorpusConfig& config) {
  ProseCorpus corpus;
  ASSIGN_OR_RETURN(std::vector<ProseDocument> docs, ReadSources(config, &corpus.sources));
  HeldOutSplit split = SplitHeldOut(std::move(docs), config.heldout_every, config.seed);
  if (config.max_documents > 0) {
    const auto keep = [&](std::vector<ProseDocument>& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) > n) v.resize(n);
    };
    keep(split.train, config.max_documents);
    keep(split.heldout, std::max<int64_t>(1, config.max_documents / config.heldout_every));
  }
  if (split.train.empty() || split.heldout.empty()) {
    return absl::FailedPreconditionError("the prose corpus has no training or held-out documents");
  }
  // A shortened corpus is kept apart, so that quick runs do not replace the full one's datasets.
  const std::string dir =
      !config.output_dir.empty() ? config.output_dir
      : config.max_documents > 0
          ? absl::StrCat(data::DefaultDataDir(), "/prose_first", config.max_documents)
          : data::DefaultDataDir() + "/prose";
  RETURN_IF_ERROR(DefaultFileSystem().CreateDirectories(dir));
  std::string jsonl;
  for (const ProseDocument& d : split.train) {
    absl::StrAppend(&jsonl, nlohmann::json({{"text", d.text}}).dump(), "\n");
  }
  const std::string path = dir + "/prose_train.jsonl";
  const uint64_t digest = Fnv1a(jsonl);
  auto old = DefaultFileSystem().ReadFile(path);
  if (!old.ok() || *old != jsonl) RETURN_IF_ERROR(WriteFile(path, jsonl));
  corpus.gpt2_prefix = dir + "/prose_gpt2_text_document";
  corpus.bert_prefix = dir + "/prose_bert_text_sentence";
  RETURN_IF_ERROR(MakeDataset(path, digest, corpus.gpt2_prefix, "gpt2"));
  RETURN_IF_ERROR(MakeDataset(path, digest, corpus.bert_prefix, "bert"));
  corpus.heldout = std::move(split.heldout);
  corpus.train = std::move(split.train);
  corpus.dropped_overlapping = split.dropped_overlapping;
  return corpus;
}

}  // namespace experiments
}  // namespace mt
