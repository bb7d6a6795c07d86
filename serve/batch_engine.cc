#include "serve/batch_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mt {
namespace serve {

absl::StatusOr<std::unique_ptr<BatchEngine>> BatchEngine::Create(const nn::StepContext& sc,
                                                                 models::Model& model,
                                                                 const BatchLimits& limits) {
  if (limits.max_batch_size < 1 || limits.max_batched_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_batch_size ", limits.max_batch_size,
                                                   " and max_batched_tokens ",
                                                   limits.max_batched_tokens, " must be >= 1"));
  }
  ASSIGN_OR_RETURN(models::IncrementalDecoder * decoder, models::IncrementalDecoderOf(model));
  RETURN_IF_ERROR(
      decoder->StartDecoding(sc, limits.max_batch_size, model.config().max_position_embeddings));
  std::unique_ptr<BatchEngine> engine(new BatchEngine(model, *decoder, limits));
  // Probe the slotted entry points (a model may decode without them).
  const absl::Status probe = decoder->ResetSlot(0);
  if (!probe.ok()) {
    decoder->StopDecoding();
    return probe;
  }
  for (int64_t s = limits.max_batch_size - 1; s >= 0; --s) engine->free_slots_.push_back(s);
  return engine;
}

BatchEngine::~BatchEngine() { decoder_.StopDecoding(); }

absl::Status BatchEngine::Add(int64_t id, const std::vector<std::vector<int32_t>>& prompts,
                              const GenerateConfig& config, StopCondition stop) {
  RETURN_IF_ERROR(CheckGenerateArguments(model_, prompts, config));
  if (requests_.count(id) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("request ", id, " is already queued"));
  }
  Request& r = requests_[id];
  r.config = config;
  r.stop = std::move(stop);
  r.unfinished = static_cast<int64_t>(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Generation g;
    g.tokens = prompts[i];
    g.prompt_length = static_cast<int64_t>(prompts[i].size());
    r.generations.push_back(std::move(g));
    waiting_.push_back(Sequence{id, static_cast<int64_t>(i)});
  }
  return absl::OkStatus();
}

void BatchEngine::Free(const Sequence& s) {
  if (s.slot >= 0) free_slots_.push_back(s.slot);
}

void BatchEngine::Cancel(int64_t id) {
  if (requests_.erase(id) == 0) return;
  auto of_id = [id](const Sequence& s) { return s.request == id; };
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), of_id), waiting_.end());
  for (const Sequence& s : running_) {
    if (of_id(s)) Free(s);
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(), of_id), running_.end());
  done_.erase(std::remove(done_.begin(), done_.end(), id), done_.end());
}

std::vector<Generation> BatchEngine::TakeResult(int64_t id) {
  auto done = std::find(done_.begin(), done_.end(), id);
  if (done == done_.end()) return {};
  done_.erase(done);
  std::vector<Generation> out = std::move(requests_[id].generations);
  requests_.erase(id);
  return out;
}

absl::StatusOr<int64_t> BatchEngine::Admit() {
  // The lowest free slot first, so that a lone request always decodes in slot 0.
  std::sort(free_slots_.begin(), free_slots_.end(), std::greater<int64_t>());
  int64_t tokens = static_cast<int64_t>(running_.size()), admitted = 0;
  while (!free_slots_.empty() && !waiting_.empty()) {
    Sequence s = waiting_.front();
    const int64_t cost = requests_[s.request].generations[s.index].prompt_length;
    if (admitted > 0 && tokens + cost > limits_.max_batched_tokens) break;
    s.slot = free_slots_.back();
    free_slots_.pop_back();
    RETURN_IF_ERROR(decoder_.ResetSlot(s.slot));
    waiting_.pop_front();
    running_.push_back(s);
    tokens += cost;
    ++admitted;
  }
  return admitted;
}

absl::Status BatchEngine::RunModel(const nn::StepContext& sc, bool every) {
  std::vector<models::IncrementalDecoder::SlotTokens> spans;
  int64_t rows = 0;
  for (const Sequence& s : running_) {
    const Generation& g = requests_[s.request].generations[s.index];
    absl::Span<const int32_t> tokens(g.tokens);
    spans.push_back({s.slot, s.prefilled ? tokens.subspan(tokens.size() - 1) : tokens});
    rows += static_cast<int64_t>(spans.back().tokens.size());
  }
  const int64_t R = every ? rows : static_cast<int64_t>(spans.size());
  const int64_t Vp = model_.padded_vocab();
  if (logits_.shape() != Shape{R, Vp}) logits_ = Tensor::Host({R, Vp}, DType::kF32);
  return decoder_.DecodeSlots(sc, spans, logits_.view());
}

void BatchEngine::ScorePrompt(const Sequence& s, int64_t row) {
  Generation& g = requests_[s.request].generations[s.index];
  const int64_t V = model_.config().vocab_size, Vp = model_.padded_vocab();
  for (int64_t i = 1; i < g.prompt_length; ++i) {
    const float* logits = logits_.data_as<float>() + (row + i - 1) * Vp;
    g.logprobs.push_back(
        static_cast<float>(LogProbability(absl::MakeConstSpan(logits, V), g.tokens[i])));
  }
}

absl::StatusOr<bool> BatchEngine::Advance(const Sequence& s, const float* row, StepReport* report) {
  Request& r = requests_[s.request];
  Generation& g = r.generations[s.index];
  if (r.config.tokens_to_generate == 0) return true;
  const absl::Span<const float> logits(row, model_.config().vocab_size);
  const int64_t p = static_cast<int64_t>(g.tokens.size());
  ASSIGN_OR_RETURN(const int32_t token, SampleToken(logits, r.config.sampling, s.index, p));
  g.tokens.push_back(token);
  float logprob = 0;
  if (r.config.logprobs) {
    logprob = static_cast<float>(LogProbability(logits, token));
    g.logprobs.push_back(logprob);
  }
  report->tokens.push_back(TokenEvent{s.request, s.index, token, logprob});
  if (token == r.config.eod) {
    g.finish = FinishReason::kEod;
  } else if (r.stop && r.stop(s.index, absl::MakeConstSpan(g.tokens).subspan(g.prompt_length))) {
    g.finish = FinishReason::kStop;
  } else if (g.generated() < r.config.tokens_to_generate) {
    return false;
  }
  return true;
}

absl::StatusOr<StepReport> BatchEngine::Step(const nn::StepContext& sc) {
  StepReport report;
  RETURN_IF_ERROR(Admit().status());
  if (running_.empty()) return report;
  // Every position's logits only when a prompt in this step is scored.
  bool every = false;
  for (const Sequence& s : running_) {
    const Request& r = requests_[s.request];
    every =
        every || (!s.prefilled && r.config.logprobs && r.generations[s.index].prompt_length > 1);
  }
  RETURN_IF_ERROR(RunModel(sc, every));
  const int64_t Vp = model_.padded_vocab();
  std::vector<Sequence> still;
  int64_t row = 0;
  for (Sequence& s : running_) {
    const int64_t n = s.prefilled ? 1 : requests_[s.request].generations[s.index].prompt_length;
    if (every && !s.prefilled && requests_[s.request].config.logprobs) ScorePrompt(s, row);
    const int64_t last = every ? row + n - 1 : static_cast<int64_t>(&s - running_.data());
    row += every ? n : 1;
    report.rows += n;
    s.prefilled = true;
    ASSIGN_OR_RETURN(const bool finished,
                     Advance(s, logits_.data_as<float>() + last * Vp, &report));
    if (!finished) {
      still.push_back(s);
      continue;
    }
    Free(s);
    if (--requests_[s.request].unfinished == 0) {
      done_.push_back(s.request);
      report.finished.push_back(s.request);
    }
  }
  report.sequences = static_cast<int64_t>(running_.size());
  running_ = std::move(still);
  return report;
}

}  // namespace serve
}  // namespace mt
