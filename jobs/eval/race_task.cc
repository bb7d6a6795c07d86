#include "jobs/eval/race_task.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "core/status.h"
#include "data/tokenizers/factory.h"
#include "data/tokenizers/wordpiece.h"
#include "models/config.h"
#include "models/multiple_choice.h"

namespace mt {
namespace jobs {

using eval::Harness;
using eval::HarnessConfig;
using eval::Json;
using eval::JsonlWriter;
using eval::ListRaceQuestions;
using eval::ProgressMeter;
using eval::RaceBatcher;
using eval::RaceGroup;
using eval::RaceLevelName;
using eval::RaceQuestionRef;
using eval::RaceScore;
using eval::RaceScores;
using eval::RaceTally;
using eval::ReadRace;
using eval::ScoreSplits;
using eval::ShuffledOrder;
namespace {

constexpr char kHeadPrefix[] = "multiple_choice_head.";

absl::StatusOr<std::unique_ptr<data::Tokenizer>> LoadBertTokenizer(const std::string& vocab_file) {
  if (vocab_file.empty()) return data::CreateTokenizer("bert");
  ASSIGN_OR_RETURN(std::unique_ptr<data::WordPiece> wordpiece, data::WordPiece::Load(vocab_file));
  return std::unique_ptr<data::Tokenizer>(std::move(wordpiece));
}

// OK when `checkpoint` holds a BERT-family model with token types 0 and 1 over the tokenizer's
// vocabulary.
absl::Status CheckRaceModel(const checkpoint::CheckpointModel& checkpoint,
                            const data::Tokenizer& tokenizer) {
  const models::ModelConfig& c = checkpoint.config;
  if (c.family != models::Family::kBert) {
    return absl::FailedPreconditionError(
        absl::StrCat("race fine-tunes BERT-family models; checkpoint ", checkpoint.dir, " holds a ",
                     models::FamilyArchitecture(c.family), "-family model (architecture '",
                     c.ArchitectureName(), "')"));
  }
  if (c.num_token_types < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("RACE marks the article with token type 1; the model of ", checkpoint.dir,
                     " has num_token_types = ", c.num_token_types));
  }
  if (c.vocab_size != tokenizer.vocab_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", checkpoint.dir, " has a vocabulary of ", c.vocab_size, " tokens but the ",
        tokenizer.name(), " tokenizer has ", tokenizer.vocab_size(),
        " (give the model's WordPiece vocab.txt with --vocab_file)"));
  }
  return absl::OkStatus();
}

Json Counts(int64_t questions, int64_t correct, double loss_sum) {
  return Json{{"questions", questions},
              {"correct", correct},
              {"accuracy", static_cast<double>(correct) / static_cast<double>(questions)},
              {"loss", loss_sum / static_cast<double>(questions)}};
}

// The summed loss of a score: a group's own, a split's groups' ("dev": "dev/..."), or all.
double LossSum(const RaceScore& s, const std::map<std::string, double>& group_sums) {
  double sum = 0;
  for (const auto& [name, value] : group_sums) {
    if (s.name == "overall" || name == s.name || absl::StartsWith(name, s.name + "/")) sum += value;
  }
  return sum;
}

// {"splits": {groups..., splits...}, "overall": {...}}.
Json ScoresJson(const RaceScores& scores, const std::map<std::string, double>& loss_sums) {
  Json splits = Json::object();
  auto add = [&](Json& into, const RaceScore& s) {
    into[s.name] = Counts(s.questions, s.correct, LossSum(s, loss_sums));
  };
  for (const RaceScore& s : scores.groups) add(splits, s);
  for (const RaceScore& s : scores.splits) add(splits, s);
  Json out = {{"splits", splits}};
  add(out, scores.overall);
  return out;
}

std::string AnswerLetter(int32_t choice) { return std::string(1, static_cast<char>('A' + choice)); }

}  // namespace

absl::Status RaceConfig::Validate() const {
  HarnessConfig h = harness;  // Its vocab_file / merge_file pairing is GPT-2's.
  h.vocab_file.clear();
  h.merge_file.clear();
  RETURN_IF_ERROR(h.Validate());
  if (data.empty()) {
    return absl::InvalidArgumentError(
        "--data is required (the RACE directory: {train,dev,test}/{middle,high}/*.txt)");
  }
  if (!harness.merge_file.empty()) {
    return absl::InvalidArgumentError(
        "--merge_file is GPT-2's; RACE uses BERT WordPiece (--vocab_file=vocab.txt, or none for "
        "the installed bert-base-uncased)");
  }
  if (seq_length < 0 || max_qa_length < 1 || epochs < 1 || log_interval < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need --seq_length >= 0, --max_qa_length >= 1, --epochs >= 1 and --log_interval >= 1 "
        "(got ",
        seq_length, ", ", max_qa_length, ", ", epochs, " and ", log_interval, ")"));
  }
  if (global_batch_size < 1 || global_batch_size % harness.micro_batch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--global_batch_size=", global_batch_size,
        " must be a positive multiple of --micro_batch_size=", harness.micro_batch_size,
        " (both count questions)"));
  }
  if (!(lr >= 0) || !(lr_warmup_fraction >= 0 && lr_warmup_fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("need --lr >= 0 and --lr_warmup_fraction in ",
                                                   "[0, 1] (got ", lr, " and ", lr_warmup_fraction,
                                                   ")"));
  }
  RETURN_IF_ERROR(eval::ParseRaceReadout(readout).status());
  if (eval_only && !save.empty()) {
    return absl::InvalidArgumentError("--save with --eval_only: nothing is trained to save");
  }
  return absl::OkStatus();
}

absl::Status RaceTask::Prepare(const checkpoint::CheckpointModel& checkpoint, bool rank0) {
  ASSIGN_OR_RETURN(tokenizer_, LoadBertTokenizer(config_.harness.vocab_file));
  RETURN_IF_ERROR(CheckRaceModel(checkpoint, *tokenizer_));
  const int64_t positions = checkpoint.config.max_position_embeddings;
  layout_.seq_length =
      config_.seq_length > 0 ? config_.seq_length : std::min<int64_t>(512, positions);
  layout_.max_qa_length = config_.max_qa_length;
  ASSIGN_OR_RETURN(layout_.readout, eval::ParseRaceReadout(config_.readout));
  if (layout_.seq_length > positions || layout_.seq_length < 2) {
    return absl::InvalidArgumentError(absl::StrCat("--seq_length=", layout_.seq_length,
                                                   " must be in [2, ", positions,
                                                   "] (the model's max_position_embeddings)"));
  }
  ASSIGN_OR_RETURN(eval_, ReadRace(config_.data, {"dev", "test"}));
  if (!config_.eval_only) {
    ASSIGN_OR_RETURN(train_, ReadRace(config_.data, {"train"}));
    train_questions_ = ListRaceQuestions(train_);
    steps_per_epoch_ = static_cast<int64_t>(train_questions_.size()) / config_.global_batch_size;
    if (steps_per_epoch_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--global_batch_size=", config_.global_batch_size, " exceeds the ",
                       train_questions_.size(), " training questions of ", config_.data, "/train"));
    }
  }
  if (layout_.readout == eval::RaceReadout::kMasked) {
    // Every question, before any step: the masked readout needs a blank in each.
    for (const std::vector<RaceGroup>* groups : {&eval_, &train_}) {
      for (const RaceGroup& g : *groups) {
        for (const eval::RaceArticle& a : g.articles) RETURN_IF_ERROR(eval::CheckRaceBlanks(a));
      }
    }
  }
  batcher_ = std::make_unique<RaceBatcher>(tokenizer_.get(), layout_);
  // Fails here, not mid-run, for a vocabulary without [CLS], [SEP] or [PAD].
  RETURN_IF_ERROR(batcher_->Layout(eval_, ListRaceQuestions(eval_, 0)).status());
  model_name_ = checkpoint.model_name;
  if (!rank0) return absl::OkStatus();
  if (!config_.save.empty()) {
    absl::StatusOr<int64_t> existing = checkpoint::LatestIteration(config_.save);
    if (existing.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("--save=", config_.save,
                                                        " already holds a checkpoint (iteration ",
                                                        *existing, "); give a new directory"));
    }
  }
  if (!config_.harness.per_example_jsonl.empty()) {
    ASSIGN_OR_RETURN(per_example_, JsonlWriter::Open(config_.harness.per_example_jsonl));
  }
  if (!config_.log_jsonl.empty() && !config_.eval_only) {
    ASSIGN_OR_RETURN(log_, JsonlWriter::Open(config_.log_jsonl));
  }
  return absl::OkStatus();
}

checkpoint::LoadModelOptions RaceTask::LoadOptions() const {
  checkpoint::LoadModelOptions options;
  // The masked readout scores with the checkpoint's own MLM head; the pooled one adds a head.
  options.model.heads =
      config_.readout == "masked" ? models::Heads::kPretraining : models::Heads::kMultipleChoice;
  options.load.allow_missing = true;
  options.load.allow_unexpected = true;  // The pretraining heads.
  options.seed = config_.seed;
  return options;
}

absl::Status RaceTask::Loaded(Harness& harness) {
  const std::vector<std::string>& missing = harness.parameter_load().missing;
  std::vector<std::string> wrong;
  for (const std::string& name : missing) {
    if (config_.eval_only || !absl::StartsWith(name, kHeadPrefix)) wrong.push_back(name);
  }
  if (!wrong.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", harness.checkpoint().dir, " lacks ", absl::StrJoin(wrong, ", "),
        config_.eval_only ? " (--eval_only scores a fine-tuned checkpoint: fine-tune this one "
                            "first, without --eval_only)"
                          : " (RACE fine-tunes a BERT checkpoint with all of its encoder)"));
  }
  if (config_.eval_only) return absl::OkStatus();
  RaceTrainingOptions o;
  o.micro_batch_size = config_.harness.micro_batch_size;
  o.global_batch_size = config_.global_batch_size;
  o.total_steps = steps_per_epoch_ * config_.epochs;
  o.lr = config_.lr;
  o.warmup_fraction = config_.lr_warmup_fraction;
  o.weight_decay = config_.weight_decay;
  o.clip_grad = config_.clip_grad;
  o.seed = config_.seed;
  o.compute_dtype = harness.compute_dtype();
  ASSIGN_OR_RETURN(tuner_, RaceFineTuner::Create(&harness.store(), o));
  return absl::OkStatus();
}

void RaceTask::PrintSummary(const Harness& harness) const {
  auto counts = [](const std::vector<RaceGroup>& groups) {
    std::vector<std::string> parts;
    for (const RaceGroup& g : groups) {
      parts.push_back(absl::StrCat(g.name(), " ", g.num_questions()));
    }
    return absl::StrJoin(parts, ", ");
  };
  std::printf("race: scoring %s questions; sequences of %lld tokens\n", counts(eval_).c_str(),
              static_cast<long long>(layout_.seq_length));
  if (!config_.eval_only) {
    std::printf("race: fine-tuning on %s questions: %d epochs of %lld steps of %lld questions\n",
                counts(train_).c_str(), config_.epochs, static_cast<long long>(steps_per_epoch_),
                static_cast<long long>(config_.global_batch_size));
  }
  const checkpoint::ParameterLoad& load = harness.parameter_load();
  if (!load.missing.empty() || !load.ignored.empty()) {
    std::printf("race: initialised from --seed: %s; not used: %s\n",
                absl::StrJoin(load.missing, ", ").c_str(),
                absl::StrJoin(load.ignored, ", ").c_str());
  }
  std::fflush(stdout);
}

absl::StatusOr<RaceTask::GroupScore> RaceTask::ScoreGroup(Harness& harness, int32_t group,
                                                          bool per_example, ProgressMeter& progress,
                                                          int64_t* done) {
  const std::vector<RaceQuestionRef> refs = ListRaceQuestions(eval_, group);
  const int64_t B = config_.harness.micro_batch_size, n = static_cast<int64_t>(refs.size());
  const RaceGroup& g = eval_[group];
  ASSIGN_OR_RETURN(models::MultipleChoiceModel * multiple_choice,
                   models::MultipleChoiceOf(harness.model()));
  GroupScore score;
  for (int64_t first = 0; first < n; first += B) {
    const int64_t count = std::min(B, n - first);
    const absl::Span<const RaceQuestionRef> some = absl::MakeConstSpan(refs).subspan(first, count);
    ASSIGN_OR_RETURN(const models::Batch batch, batcher_->Layout(eval_, some));
    ASSIGN_OR_RETURN(
        const models::MultipleChoiceResult result,
        multiple_choice->MultipleChoice(harness.step_context(), batch, models::Backward::kNo));
    const std::vector<int32_t>& labels = batcher_->rows().labels;
    score.questions += count;
    score.loss_sum += result.loss * static_cast<double>(count);
    for (int64_t k = 0; k < count; ++k) {
      const bool right = result.predictions[k] == labels[k];
      score.correct += right ? 1 : 0;
      if (per_example && per_example_ != nullptr) {
        const RaceQuestionRef& r = some[k];
        RETURN_IF_ERROR(per_example_->Write({{"split", g.split},
                                             {"level", RaceLevelName(g.level)},
                                             {"file", g.articles[r.article].path},
                                             {"question", r.question},
                                             {"answer", AnswerLetter(labels[k])},
                                             {"predicted", AnswerLetter(result.predictions[k])},
                                             {"correct", right}}));
      }
    }
    *done += count;
    progress.Update(*done, *done);
  }
  return score;
}

absl::StatusOr<RaceTask::Evaluation> RaceTask::Evaluate(Harness& harness, bool per_example) {
  int64_t total = 0, done = 0;
  for (const RaceGroup& g : eval_) total += g.num_questions();
  ProgressMeter progress("race", "questions scored", total, config_.harness.progress_interval,
                         harness.rank0(), "questions");
  Evaluation e;
  std::vector<RaceTally> tallies;
  for (size_t k = 0; k < eval_.size(); ++k) {
    ASSIGN_OR_RETURN(const GroupScore s,
                     ScoreGroup(harness, static_cast<int32_t>(k), per_example, progress, &done));
    tallies.push_back({eval_[k].split, eval_[k].level, s.questions, s.correct});
    e.loss_sums[eval_[k].name()] = s.loss_sum;
  }
  ASSIGN_OR_RETURN(e.scores, ScoreSplits(tallies));
  return e;
}

absl::Status RaceTask::LogStep(const RaceStep& step, int64_t step_index, int epoch,
                               double seconds) {
  interval_.questions += step.questions;
  interval_.correct += step.correct;
  interval_.loss_sum += step.loss;
  ++interval_.steps;
  interval_seconds_ += seconds;
  if (log_ != nullptr) {
    RETURN_IF_ERROR(log_->Write({{"step", step_index},
                                 {"epoch", epoch},
                                 {"loss", step.loss},
                                 {"questions", step.questions},
                                 {"correct", step.correct},
                                 {"learning_rate", step.learning_rate},
                                 {"grad_norm", std::isfinite(step.grad_norm) ? step.grad_norm : -1},
                                 {"loss_scale", step.loss_scale},
                                 {"skipped", step.skipped}}));
  }
  const int64_t total = steps_per_epoch_ * config_.epochs;
  if (step_index % config_.log_interval != 0 && step_index != total) return absl::OkStatus();
  std::printf(
      "race: step %lld/%lld (epoch %d) | choice loss %.6E | train accuracy %.4f | learning rate "
      "%.3E | grad norm %.3f | loss scale %.1f | skipped steps %lld | %.1f questions/s\n",
      static_cast<long long>(step_index), static_cast<long long>(total), epoch,
      interval_.loss_sum / interval_.steps,
      static_cast<double>(interval_.correct) / interval_.questions, step.learning_rate,
      step.grad_norm, step.loss_scale, static_cast<long long>(tuner_->skipped_steps()),
      interval_.questions / std::max(interval_seconds_, 1e-9));
  std::fflush(stdout);
  interval_ = EpochStats();
  interval_seconds_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<RaceTask::EpochStats> RaceTask::TrainEpoch(Harness& harness, int epoch,
                                                          ProgressMeter& progress) {
  const std::vector<int64_t> order =
      ShuffledOrder(static_cast<int64_t>(train_questions_.size()), config_.seed, epoch);
  const int64_t G = config_.global_batch_size;
  std::vector<RaceQuestionRef> step_questions(G);
  EpochStats stats;
  for (int64_t s = 0; s < steps_per_epoch_; ++s) {
    for (int64_t k = 0; k < G; ++k) step_questions[k] = train_questions_[order[s * G + k]];
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(const RaceStep step, tuner_->Step(harness.model(), harness.step_context(),
                                                       *batcher_, train_, step_questions));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats.questions += step.questions;
    stats.correct += step.correct;
    stats.loss_sum += step.loss;
    ++stats.steps;
    if (harness.rank0()) RETURN_IF_ERROR(LogStep(step, tuner_->steps(), epoch, seconds));
    progress.Update(tuner_->steps(), tuner_->steps() * G);
  }
  return stats;
}

absl::StatusOr<Json> RaceTask::Run(Harness& harness) {
  const bool rank0 = harness.rank0();
  if (rank0) PrintSummary(harness);
  Json train_json;
  ProgressMeter progress("race", "steps", steps_per_epoch_ * config_.epochs,
                         config_.harness.progress_interval, rank0, "questions");
  const int epochs = config_.eval_only ? 0 : config_.epochs;
  Evaluation last;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    ASSIGN_OR_RETURN(const EpochStats stats, TrainEpoch(harness, epoch, progress));
    ASSIGN_OR_RETURN(last, Evaluate(harness, /*per_example=*/epoch == epochs));
    // The steps' mean losses, averaged (every step has global_batch_size questions).
    train_json = Counts(stats.questions, stats.correct,
                        stats.loss_sum / static_cast<double>(stats.steps) * stats.questions);
    if (!rank0) continue;
    Json line = {{"epoch", epoch}, {"steps", tuner_->steps()}, {"train", train_json}};
    line.update(ScoresJson(last.scores, last.loss_sums));
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  if (epochs == 0) {
    ASSIGN_OR_RETURN(last, Evaluate(harness, /*per_example=*/true));
  }
  if (!config_.save.empty()) {
    RETURN_IF_ERROR(
        tuner_->Save(config_.save, harness.parallel(), harness.checkpoint().config, model_name_));
    if (rank0) std::printf("race: saved the fine-tuned model to %s\n", config_.save.c_str());
  }
  if (!rank0) return Json::object();
  if (per_example_ != nullptr) RETURN_IF_ERROR(per_example_->Close());
  if (log_ != nullptr) RETURN_IF_ERROR(log_->Close());
  Json results = {{"task", "race"}};
  results.update(ScoresJson(last.scores, last.loss_sums));
  results["epochs"] = epochs;
  results["steps"] = tuner_ != nullptr ? tuner_->steps() : 0;
  results["seq_length"] = layout_.seq_length;
  results["readout"] = config_.readout;
  results["model"] = model_name_;
  if (epochs > 0) results["train"] = train_json;
  return results;
}

}  // namespace jobs
}  // namespace mt
