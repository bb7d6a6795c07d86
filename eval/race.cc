#include "eval/race.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "eval/python_text.h"
#include "eval/text_file.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace eval {
namespace {

using Json = nlohmann::json;

absl::Status Bad(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

absl::StatusOr<const Json*> Key(const Json& object, const char* key, const std::string& path) {
  const auto it = object.find(key);
  if (it == object.end()) return Bad(path, absl::StrCat("no key '", key, "'"));
  return &*it;
}

// The strings of the array `value`, which errors call `name` ("'questions'", "'options'[2]").
absl::StatusOr<std::vector<std::string>> Strings(const Json& value, absl::string_view name,
                                                 const std::string& path) {
  if (!value.is_array()) return Bad(path, absl::StrCat(name, " is not an array"));
  std::vector<std::string> out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) return Bad(path, absl::StrCat(name, "[", i, "] is not a string"));
    out.push_back(value[i].get<std::string>());
  }
  return out;
}

absl::StatusOr<int32_t> ParseAnswer(const std::string& answer, size_t i, const std::string& path) {
  if (answer.size() != 1 || answer[0] < 'A' || answer[0] > 'D') {
    return Bad(path,
               absl::StrCat("'answers'[", i, "] is '", answer, "'; expected one of A, B, C, D"));
  }
  return answer[0] - 'A';
}

// Fills article->questions from the parsed file.
absl::Status ReadQuestions(const Json& j, const std::string& path, RaceArticle* article) {
  ASSIGN_OR_RETURN(const Json* questions_json, Key(j, "questions", path));
  ASSIGN_OR_RETURN(const Json* options, Key(j, "options", path));
  ASSIGN_OR_RETURN(const Json* answers_json, Key(j, "answers", path));
  ASSIGN_OR_RETURN(const std::vector<std::string> questions,
                   Strings(*questions_json, "'questions'", path));
  ASSIGN_OR_RETURN(const std::vector<std::string> answers,
                   Strings(*answers_json, "'answers'", path));
  if (!options->is_array()) return Bad(path, "'options' is not an array");
  if (options->size() != questions.size() || answers.size() != questions.size()) {
    return Bad(path,
               absl::StrCat(questions.size(), " 'questions', ", options->size(), " 'options' and ",
                            answers.size(), " 'answers'; expected one of each per question"));
  }
  for (size_t i = 0; i < questions.size(); ++i) {
    ASSIGN_OR_RETURN(std::vector<std::string> opts,
                     Strings((*options)[i], absl::StrCat("'options'[", i, "]"), path));
    if (opts.size() != kRaceChoices) {
      return Bad(path, absl::StrCat("'options'[", i, "] has ", opts.size(), " options; expected ",
                                    kRaceChoices));
    }
    RaceQuestion q;
    q.question = questions[i];
    for (int c = 0; c < kRaceChoices; ++c) q.options[c] = std::move(opts[c]);
    ASSIGN_OR_RETURN(q.label, ParseAnswer(answers[i], i, path));
    article->questions.push_back(std::move(q));
  }
  return absl::OkStatus();
}

// qa = question with every "_" replaced by the option, or question + " " + option.
std::string QuestionWithOption(const std::string& question, const std::string& option) {
  if (absl::StrContains(question, '_')) return absl::StrReplaceAll(question, {{"_", option}});
  return absl::StrCat(question, " ", option);
}

// An unscored label: the models' ignore index (core/ops/cross_entropy.h kIgnoreIndex).
constexpr int32_t kUnscored = -100;

// Appends one row: [CLS] qa [SEP] article, cut to L - 1 if it has L or more tokens, then [SEP]
// of type 1, then padding. qa_labels (masked readout; empty otherwise): qa's MLM labels; returns
// how many of its scored positions the row kept.
int64_t AppendRow(absl::Span<const int32_t> qa, absl::Span<const int32_t> article,
                  absl::Span<const int32_t> qa_labels, const data::SpecialTokens& special,
                  int64_t L, RaceRows* rows) {
  std::vector<int32_t> ids = {special.cls};
  ids.insert(ids.end(), qa.begin(), qa.end());
  ids.push_back(special.sep);
  const size_t first_article = ids.size();
  ids.insert(ids.end(), article.begin(), article.end());
  if (static_cast<int64_t>(ids.size()) >= L) ids.resize(L - 1);
  ids.push_back(special.sep);
  const size_t used = ids.size();
  int64_t kept = 0;
  for (size_t j = 0; j < static_cast<size_t>(L); ++j) {
    rows->tokens.push_back(j < used ? ids[j] : special.pad);
    rows->token_types.push_back(j < used && (j >= first_article || j + 1 == used) ? 1 : 0);
    rows->padding_mask.push_back(j < used ? 1 : 0);
    if (qa_labels.empty()) continue;
    // Position j holds qa[j - 1] when 1 <= j <= qa.size() and the row was not cut before it.
    const bool in_qa = j >= 1 && j <= qa.size() && j + 1 < used;
    const int32_t label = in_qa ? qa_labels[j - 1] : kUnscored;
    rows->mlm_labels.push_back(label);
    kept += label != kUnscored ? 1 : 0;
  }
  return kept;
}

// The masked readout's qa for one option: the question's text around each "_" tokenized, the
// option's pieces masked at every blank; *labels the pieces there, -100 elsewhere.
std::vector<int32_t> MaskedQa(const data::Tokenizer& tokenizer, const std::string& question,
                              absl::Span<const int32_t> option, int32_t mask,
                              std::vector<int32_t>* labels) {
  std::vector<int32_t> qa;
  labels->clear();
  bool first = true;
  for (absl::string_view part : absl::StrSplit(question, '_')) {
    if (!first) {
      for (int32_t piece : option) {
        qa.push_back(mask);
        labels->push_back(piece);
      }
    }
    first = false;
    for (int32_t id : tokenizer.Encode(CleanRaceText(part))) {
      qa.push_back(id);
      labels->push_back(kUnscored);
    }
  }
  return qa;
}

}  // namespace

absl::StatusOr<RaceReadout> ParseRaceReadout(absl::string_view name) {
  if (name == "pooled") return RaceReadout::kPooled;
  if (name == "masked") return RaceReadout::kMasked;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown RACE readout '", name, "'; known: pooled, masked"));
}

absl::Status CheckRaceBlanks(const RaceArticle& article) {
  for (size_t n = 0; n < article.questions.size(); ++n) {
    if (!absl::StrContains(article.questions[n].question, '_')) {
      return absl::InvalidArgumentError(
          absl::StrCat(article.path, ": question ", n,
                       " has no blank \"_\" for the masked readout (cloze questions only)"));
    }
  }
  return absl::OkStatus();
}

absl::string_view RaceLevelName(RaceLevel level) {
  return level == RaceLevel::kMiddle ? "middle" : "high";
}

std::string RaceGroup::name() const { return absl::StrCat(split, "/", RaceLevelName(level)); }

int64_t RaceGroup::num_questions() const {
  int64_t n = 0;
  for (const RaceArticle& a : articles) n += static_cast<int64_t>(a.questions.size());
  return n;
}

absl::StatusOr<RaceArticle> ReadRaceFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string contents, ReadTextFile(path));
  const Json j = Json::parse(contents, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(path, "not valid JSON");
  if (!j.is_object()) return Bad(path, "not a JSON object");
  RaceArticle article;
  article.path = path;
  ASSIGN_OR_RETURN(const Json* text, Key(j, "article", path));
  if (!text->is_string()) return Bad(path, "'article' is not a string");
  article.article = text->get<std::string>();
  RETURN_IF_ERROR(ReadQuestions(j, path, &article));
  return article;
}

absl::StatusOr<RaceGroup> ReadRaceGroup(const std::string& root, absl::string_view split,
                                        RaceLevel level) {
  if (split != "train" && split != "dev" && split != "test") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown RACE split '", split, "'; known: train, dev, test"));
  }
  const std::string split_dir = absl::StrCat(root, "/", split);
  if (absl::Status s = ListFiles(split_dir, "").status(); !s.ok()) {
    return Prefixed(s, absl::StrCat("RACE split '", split, "' (expected ", root,
                                    "/{train,dev,test}/{middle,high}/*.txt): "));
  }
  RaceGroup group;
  group.split = std::string(split);
  group.level = level;
  const std::string dir = absl::StrCat(split_dir, "/", RaceLevelName(level));
  absl::StatusOr<std::vector<std::string>> names = ListFiles(dir, ".txt");
  if (!names.ok()) return Prefixed(names.status(), absl::StrCat("RACE ", group.name(), ": "));
  if (names->empty()) return absl::NotFoundError(absl::StrCat("no *.txt files in ", dir));
  for (const std::string& name : *names) {
    ASSIGN_OR_RETURN(RaceArticle article, ReadRaceFile(absl::StrCat(dir, "/", name)));
    group.articles.push_back(std::move(article));
  }
  return group;
}

absl::StatusOr<std::vector<RaceGroup>> ReadRace(const std::string& root,
                                                absl::Span<const std::string> splits) {
  std::vector<RaceGroup> groups;
  for (const std::string& split : splits) {
    for (RaceLevel level : {RaceLevel::kMiddle, RaceLevel::kHigh}) {
      ASSIGN_OR_RETURN(RaceGroup group, ReadRaceGroup(root, split, level));
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

std::string CleanRaceText(absl::string_view text) {
  // Megatron first turns "\n" into " "; the whitespace collapse below subsumes that.
  std::string s = PyCollapseSpaces(text);
  for (int pass = 0; pass < 3; ++pass) absl::StrReplaceAll({{" . ", ". "}}, &s);
  return std::string(PyStrip(s));
}

absl::Status AppendRaceArticle(const data::Tokenizer& tokenizer, const RaceArticle& article,
                               const RaceLayoutOptions& options, RaceRows* rows) {
  const data::SpecialTokens special = tokenizer.special_tokens();
  if (special.cls == data::kNoToken || special.sep == data::kNoToken ||
      special.pad == data::kNoToken) {
    return absl::InvalidArgumentError(absl::StrCat("RACE layout: tokenizer '", tokenizer.name(),
                                                   "' has no [CLS], [SEP] or [PAD]; use bert"));
  }
  const int64_t L = options.seq_length;
  if (L < 2 || options.max_qa_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat("RACE layout: need seq_length >= 2 and ",
                                                   "max_qa_length >= 1, got ", L, " and ",
                                                   options.max_qa_length));
  }
  if (rows->seq_length != 0 && rows->seq_length != L) {
    return absl::InvalidArgumentError(absl::StrCat("RACE layout: rows of seq_length ",
                                                   rows->seq_length, " cannot take rows of ", L));
  }
  const bool masked = options.readout == RaceReadout::kMasked;
  if (masked && special.mask == data::kNoToken) {
    return absl::InvalidArgumentError(absl::StrCat("RACE layout: tokenizer '", tokenizer.name(),
                                                   "' has no [MASK] for the masked readout"));
  }
  if (masked) RETURN_IF_ERROR(CheckRaceBlanks(article));
  // Built apart and appended at the end, so that *rows is unchanged on error.
  RaceRows out;
  const std::vector<int32_t> article_ids = tokenizer.Encode(CleanRaceText(article.article));
  std::vector<int32_t> qa_labels;
  for (size_t n = 0; n < article.questions.size(); ++n) {
    const RaceQuestion& q = article.questions[n];
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(article.path, ": question ", n, " ", why));
    };
    for (const std::string& option : q.options) {
      std::vector<int32_t> qa;
      if (masked) {
        const std::vector<int32_t> pieces = tokenizer.Encode(CleanRaceText(option));
        if (pieces.empty()) {
          return bad(absl::StrCat("has an option without tokens: '", option, "'"));
        }
        qa = MaskedQa(tokenizer, q.question, pieces, special.mask, &qa_labels);
      } else {
        qa = tokenizer.Encode(CleanRaceText(QuestionWithOption(q.question, option)));
      }
      const int64_t blanks = static_cast<int64_t>(std::count_if(
          qa_labels.begin(), qa_labels.end(), [](int32_t l) { return l != kUnscored; }));
      if (static_cast<int64_t>(qa.size()) > options.max_qa_length) {
        qa.resize(options.max_qa_length);
        if (masked) qa_labels.resize(options.max_qa_length);
      }
      const int64_t kept = AppendRow(qa, article_ids, qa_labels, special, L, &out);
      if (masked && kept < blanks) {
        return bad(absl::StrCat("has its blank past the first ",
                                std::min(options.max_qa_length, L - 2),
                                " qa tokens the rows keep (--max_qa_length, --seq_length)"));
      }
    }
    out.labels.push_back(q.label);
  }
  rows->seq_length = L;
  for (auto [to, from] :
       {std::pair{&rows->tokens, &out.tokens}, std::pair{&rows->token_types, &out.token_types},
        std::pair{&rows->padding_mask, &out.padding_mask}, std::pair{&rows->labels, &out.labels},
        std::pair{&rows->mlm_labels, &out.mlm_labels}}) {
    to->insert(to->end(), from->begin(), from->end());
  }
  return absl::OkStatus();
}

absl::StatusOr<RaceRows> LayoutRaceGroup(const data::Tokenizer& tokenizer, const RaceGroup& group,
                                         const RaceLayoutOptions& options) {
  RaceRows rows;
  for (const RaceArticle& article : group.articles) {
    RETURN_IF_ERROR(AppendRaceArticle(tokenizer, article, options, &rows));
  }
  return rows;
}

int64_t CountCorrect(absl::Span<const float> scores, absl::Span<const int32_t> labels) {
  CHECK_EQ(scores.size(), kRaceChoices * labels.size());
  int64_t correct = 0;
  for (size_t q = 0; q < labels.size(); ++q) {
    int best = 0;
    for (int c = 1; c < kRaceChoices; ++c) {
      if (scores[q * kRaceChoices + c] > scores[q * kRaceChoices + best]) best = c;
    }
    correct += best == labels[q] ? 1 : 0;
  }
  return correct;
}

absl::StatusOr<RaceScores> ScoreSplits(absl::Span<const RaceTally> tallies) {
  if (tallies.empty()) return absl::InvalidArgumentError("RACE scores: no tallies");
  RaceScores out;
  out.overall.name = "overall";
  std::set<std::string> seen;
  for (const RaceTally& t : tallies) {
    const std::string name = absl::StrCat(t.split, "/", RaceLevelName(t.level));
    if (t.questions < 1 || t.correct < 0 || t.correct > t.questions) {
      return absl::InvalidArgumentError(absl::StrCat("RACE scores: ", name, " has ", t.correct,
                                                     " correct of ", t.questions, " questions"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("RACE scores: ", name, " appears twice"));
    }
    RaceScore* split = nullptr;
    for (RaceScore& s : out.splits) split = s.name == t.split ? &s : split;
    if (split == nullptr) split = &out.splits.emplace_back(RaceScore{t.split});
    out.groups.push_back(RaceScore{name, t.questions, t.correct});
    for (RaceScore* s : {split, &out.overall}) {
      s->questions += t.questions;
      s->correct += t.correct;
    }
  }
  for (RaceScore& s : out.groups) s.accuracy = static_cast<double>(s.correct) / s.questions;
  for (RaceScore& s : out.splits) s.accuracy = static_cast<double>(s.correct) / s.questions;
  out.overall.accuracy = static_cast<double>(out.overall.correct) / out.overall.questions;
  return out;
}

std::string RaceScoresJson(const RaceScores& scores) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  auto add = [&j](const RaceScore& s) {
    j[s.name] = {{"questions", s.questions}, {"correct", s.correct}, {"accuracy", s.accuracy}};
  };
  for (const RaceScore& s : scores.groups) add(s);
  for (const RaceScore& s : scores.splits) add(s);
  add(scores.overall);
  return j.dump();
}

}  // namespace eval
}  // namespace mt
