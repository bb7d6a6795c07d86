#include "experiments/race_finetune/cloze_race.h"

#include <algorithm>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/file_system.h"
#include "core/status.h"
#include "experiments/common/report.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace experiments {
namespace {

std::vector<std::string> Words(absl::string_view text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty());
}

bool IsAlpha(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)); }

// The word without the non-letters at its edges: "(LORD," -> "LORD"; [begin, end) in *range.
absl::string_view Core(absl::string_view word, size_t* begin = nullptr) {
  size_t b = 0, e = word.size();
  while (b < e && !IsAlpha(word[b])) ++b;
  while (e > b && !IsAlpha(word[e - 1])) --e;
  if (begin != nullptr) *begin = b;
  return word.substr(b, e - b);
}

bool IsCandidate(absl::string_view core, const ClozeRaceConfig& config) {
  if (static_cast<int>(core.size()) < config.min_word_length ||
      !std::all_of(core.begin(), core.end(), IsAlpha)) {
    return false;
  }
  if (config.tokenizer == nullptr) return true;
  // One token, and not [UNK] (which would give options the same score).
  const std::vector<int32_t> ids = config.tokenizer->Encode(core);
  return ids.size() == 1 && ids[0] != config.tokenizer->special_tokens().unk;
}

// A uniform index below n (n > 0).
size_t Pick(std::mt19937_64& rng, size_t n) { return static_cast<size_t>(rng() % n); }

}  // namespace

std::vector<std::string> Sentences(absl::string_view text) {
  std::vector<std::string> out;
  std::string current;
  for (const std::string& w : Words(text)) {
    absl::StrAppend(&current, current.empty() ? "" : " ", w);
    size_t e = w.size();
    while (e > 0 && absl::string_view("\"')]}").find(w[e - 1]) != absl::string_view::npos) --e;
    if (e > 0 && absl::string_view(".!?;:").find(w[e - 1]) != absl::string_view::npos) {
      out.push_back(std::move(current));
      current.clear();
    }
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

std::vector<ClozeQuestion> ClozeQuestions(absl::string_view article, const ClozeRaceConfig& config,
                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> candidates;  // Distinct by lowercase, in order of appearance.
  absl::flat_hash_set<std::string> lower_seen;
  for (const std::string& w : Words(article)) {
    const absl::string_view core = Core(w);
    if (IsCandidate(core, config) && lower_seen.insert(absl::AsciiStrToLower(core)).second) {
      candidates.emplace_back(core);
    }
  }
  std::vector<ClozeQuestion> out;
  if (candidates.size() < 4) return out;
  std::vector<std::string> sentences = Sentences(article);
  std::shuffle(sentences.begin(), sentences.end(), rng);
  for (const std::string& sentence : sentences) {
    if (static_cast<int>(out.size()) >= config.questions_per_article) break;
    std::vector<std::string> words = Words(sentence);
    if (words.size() < 6 || sentence.find('_') != std::string::npos) continue;
    if (config.tokenizer != nullptr && config.tokenizer->Encode(sentence).size() >
                                           static_cast<size_t>(config.max_question_tokens)) {
      continue;
    }
    absl::flat_hash_set<std::string> in_sentence;
    std::vector<size_t> blankable;
    for (size_t i = 0; i < words.size(); ++i) {
      const absl::string_view core = Core(words[i]);
      in_sentence.insert(absl::AsciiStrToLower(core));
      if (IsCandidate(core, config)) blankable.push_back(i);
    }
    std::vector<std::string> distractors;
    for (const std::string& c : candidates) {
      if (!in_sentence.contains(absl::AsciiStrToLower(c))) distractors.push_back(c);
    }
    if (blankable.empty() || distractors.size() < 3) continue;
    const size_t at = blankable[Pick(rng, blankable.size())];
    size_t begin = 0;
    const std::string answer(Core(words[at], &begin));
    std::shuffle(distractors.begin(), distractors.end(), rng);
    ClozeQuestion q;
    q.options = {answer, distractors[0], distractors[1], distractors[2]};
    std::shuffle(q.options.begin(), q.options.end(), rng);
    q.answer =
        static_cast<int>(std::find(q.options.begin(), q.options.end(), answer) - q.options.begin());
    words[at].replace(begin, answer.size(), "_");
    q.question = absl::StrJoin(words, " ");
    out.push_back(std::move(q));
  }
  return out;
}

namespace {

constexpr const char* kSplits[] = {"train", "dev", "test"};
constexpr const char* kLevels[] = {"middle", "high"};

// Writes one article's questions as RACE file `dir`/<split>/<level>/<id>.txt.
absl::Status WriteArticle(const std::string& dir, int split, int level, const std::string& id,
                          const std::string& article, const std::vector<ClozeQuestion>& qs) {
  nlohmann::json j = {{"article", article}, {"id", absl::StrCat(id, ".txt")}};
  for (const ClozeQuestion& q : qs) {
    j["questions"].push_back(q.question);
    j["options"].push_back(q.options);
    j["answers"].push_back(std::string(1, static_cast<char>('A' + q.answer)));
  }
  const std::string sub = absl::StrCat(dir, "/", kSplits[split], "/", kLevels[level]);
  RETURN_IF_ERROR(DefaultFileSystem().CreateDirectories(sub));
  return WriteFile(absl::StrCat(sub, "/", id, ".txt"), j.dump());
}

// The questions of an article within the configured length (none outside it).
std::vector<ClozeQuestion> ArticleQuestions(const std::string& article,
                                            const ClozeRaceConfig& config, uint64_t seed) {
  const int words = static_cast<int>(Words(article).size());
  if (words < config.min_article_words || words > config.max_article_words) return {};
  return ClozeQuestions(article, config, seed);
}

}  // namespace

absl::StatusOr<ClozeRaceStats> WriteClozeRace(const std::vector<std::string>& articles,
                                              const ClozeRaceConfig& config, const std::string& dir,
                                              const std::vector<std::string>& train_articles) {
  RETURN_IF_ERROR(DefaultFileSystem().RemoveAll(dir));
  const bool own_train = !train_articles.empty();
  int64_t per_group[3][2] = {{0, 0}, {0, 0}, {0, 0}};
  int64_t in_split[3] = {0, 0, 0};
  ClozeRaceStats stats;
  for (size_t a = 0; a < articles.size(); ++a) {
    const std::vector<ClozeQuestion> qs = ArticleQuestions(articles[a], config, config.seed + a);
    if (qs.empty()) continue;
    const int64_t i = stats.articles++;
    int split = i % config.test_every == 0 ? 2 : i % config.dev_every == 1 ? 1 : 0;
    if (own_train) split = i % config.dev_every == 0 ? 1 : 2;
    const int level = static_cast<int>(in_split[split]++ % 2);
    RETURN_IF_ERROR(WriteArticle(dir, split, level, absl::StrCat(a), articles[a], qs));
    stats.questions[split] += static_cast<int64_t>(qs.size());
    ++per_group[split][level];
  }
  for (size_t a = 0; a < train_articles.size(); ++a) {
    if (config.max_train_questions > 0 && stats.questions[0] >= config.max_train_questions) break;
    const std::vector<ClozeQuestion> qs =
        ArticleQuestions(train_articles[a], config, config.seed + articles.size() + a);
    if (qs.empty()) continue;
    ++stats.articles;
    const int level = static_cast<int>(in_split[0]++ % 2);
    RETURN_IF_ERROR(WriteArticle(dir, 0, level, absl::StrCat("train", a), train_articles[a], qs));
    stats.questions[0] += static_cast<int64_t>(qs.size());
    ++per_group[0][level];
  }
  for (int s = 0; s < 3; ++s) {
    for (int l = 0; l < 2; ++l) {
      if (per_group[s][l] == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the generated RACE task has no ", kSplits[s], "/", kLevels[l], " article (",
            stats.articles, " articles gave questions); use more held-out documents",
            config.tokenizer != nullptr ? " (or a larger vocabulary or question length)" : ""));
      }
    }
  }
  return stats;
}

}  // namespace experiments
}  // namespace mt
