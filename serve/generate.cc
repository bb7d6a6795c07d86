#include "serve/generate.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor.h"
#include "models/incremental_decoder.h"

namespace mt {
namespace serve {

absl::Status CheckGenerateArguments(const models::Model& model,
                                    const std::vector<std::vector<int32_t>>& prompts,
                                    const GenerateConfig& config) {
  RETURN_IF_ERROR(config.sampling.Validate());
  if (config.tokens_to_generate < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens_to_generate ", config.tokens_to_generate, " must be >= 0"));
  }
  if (prompts.empty()) return absl::InvalidArgumentError("generate: no prompts");
  const int64_t V = model.config().vocab_size, max = model.config().max_position_embeddings;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const int64_t L = static_cast<int64_t>(prompts[b].size());
    if (L == 0) return absl::InvalidArgumentError(absl::StrCat("prompt ", b, " is empty"));
    if (L + config.tokens_to_generate > max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt ", b, " has ", L, " tokens; with tokens_to_generate ", config.tokens_to_generate,
          " that exceeds the model's max_position_embeddings ", max));
    }
    for (int64_t i = 0; i < L; ++i) {
      if (prompts[b][i] < 0 || prompts[b][i] >= V) {
        return absl::InvalidArgumentError(absl::StrCat("prompt ", b, " token ", i, " is ",
                                                       prompts[b][i],
                                                       ", outside the vocabulary [0, ", V, ")"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// One batch's generation (the steps in generate.h).
class Generator {
 public:
  Generator(models::Model& model, const std::vector<std::vector<int32_t>>& prompts,
            const GenerateConfig& config, const StopCondition& stop)
      : model_(model),
        config_(config),
        stop_(stop),
        B_(static_cast<int64_t>(prompts.size())),
        V_(model.config().vocab_size),
        Vp_(model.padded_vocab()),
        done_(B_, false) {
    for (const auto& p : prompts) {
      Generation g;
      g.tokens = p;
      g.prompt_length = static_cast<int64_t>(p.size());
      out_.push_back(std::move(g));
    }
  }

  absl::StatusOr<std::vector<Generation>> Run(const nn::StepContext& sc) {
    int64_t m = out_[0].prompt_length, longest = m;
    for (const Generation& g : out_) {
      m = std::min(m, g.prompt_length);
      longest = std::max(longest, g.prompt_length);
    }
    const int64_t total = longest + config_.tokens_to_generate;
    // Without the capability, or with blocks that keep no cache: recompute.
    decoder_ = config_.decoding == Decoding::kCache ? model_.incremental_decoder() : nullptr;
    if (decoder_ != nullptr) {
      const absl::Status started = decoder_->StartDecoding(sc, B_, total);
      if (absl::IsUnimplemented(started)) {
        decoder_ = nullptr;
      } else {
        RETURN_IF_ERROR(started);
      }
    }
    logits_ = Tensor::Host({B_, Vp_}, DType::kF32);
    for (int64_t b = 0; b < B_; ++b) {
      done_[b] = config_.tokens_to_generate == 0 && out_[b].prompt_length == m;
    }
    RETURN_IF_ERROR(Prefix(sc, m));
    for (int64_t p = m; p < total; ++p) {
      for (int64_t b = 0; b < B_; ++b) RETURN_IF_ERROR(Advance(b, p));
      if (std::all_of(done_.begin(), done_.end(), [](bool d) { return d; }) || p + 1 == total) {
        break;
      }
      RETURN_IF_ERROR(Compute(sc, p, p + 1, /*every=*/nullptr));
    }
    if (decoder_ != nullptr) decoder_->StopDecoding();
    return std::move(out_);
  }

 private:
  // Every sequence's tokens at positions [t0, t1) as i32 [B, t1 - t0] (a finished sequence
  // repeats its last token: its logits are not used).
  Tensor Tokens(int64_t t0, int64_t t1) const {
    Tensor t = Tensor::Host({B_, t1 - t0}, DType::kI32);
    for (int64_t b = 0; b < B_; ++b) {
      const std::vector<int32_t>& seq = out_[b].tokens;
      for (int64_t p = t0; p < t1; ++p) {
        t.data_as<int32_t>()[b * (t1 - t0) + p - t0] =
            p < static_cast<int64_t>(seq.size()) ? seq[p] : seq.back();
      }
    }
    return t;
  }

  // Runs positions [t0, t1) (all positions before t0 are in the cache, or are recomputed): the
  // logits of t1 - 1 into logits_, and, when `every` is given, of every position in [t0, t1) into
  // it ([B * (t1 - t0), V_pad], row b * (t1 - t0) + i).
  absl::Status Compute(const nn::StepContext& sc, int64_t t0, int64_t t1, Tensor* every) {
    const int64_t n = t1 - t0;
    const bool cached = decoder_ != nullptr;
    if (cached && every == nullptr) {
      return decoder_->DecodeStep(sc, Tokens(t0, t1).view(), logits_.view());
    }
    Tensor all = Tensor::Host({B_ * (cached ? n : t1), Vp_}, DType::kF32);
    if (cached) {
      RETURN_IF_ERROR(decoder_->DecodeStep(sc, Tokens(t0, t1).view(), all.view()));
    } else {
      RETURN_IF_ERROR(model_.Logits(sc, Tokens(0, t1).view(), all.view()));
    }
    const int64_t rows = cached ? n : t1;  // Per sequence in `all`; [t0, t1) are its last n.
    if (every != nullptr) *every = Tensor::Host({B_ * n, Vp_}, DType::kF32);
    for (int64_t b = 0; b < B_; ++b) {
      const float* last_n = all.data_as<float>() + (b * rows + rows - n) * Vp_;
      if (every != nullptr) std::copy_n(last_n, n * Vp_, every->data_as<float>() + b * n * Vp_);
      std::copy_n(last_n + (n - 1) * Vp_, Vp_, logits_.data_as<float>() + b * Vp_);
    }
    return absl::OkStatus();
  }

  // The common prefix of m tokens in one step; its logits of every position when logprobs are
  // wanted (scoring the prompts' tokens 1 .. m-1).
  absl::Status Prefix(const nn::StepContext& sc, int64_t m) {
    if (!config_.logprobs || m == 1) return Compute(sc, 0, m, nullptr);
    Tensor all;
    RETURN_IF_ERROR(Compute(sc, 0, m, &all));
    for (int64_t b = 0; b < B_; ++b) {
      const float* rows = all.data_as<float>() + b * m * Vp_;
      for (int64_t i = 1; i < m; ++i) {
        out_[b].logprobs.push_back(static_cast<float>(
            LogProbability(absl::MakeConstSpan(rows + (i - 1) * Vp_, V_), out_[b].tokens[i])));
      }
    }
    return absl::OkStatus();
  }

  // Position p of sequence b from the logits of position p - 1: its prompt token, or a sample.
  absl::Status Advance(int64_t b, int64_t p) {
    if (done_[b]) return absl::OkStatus();
    Generation& g = out_[b];
    const absl::Span<const float> logits(logits_.data_as<float>() + b * Vp_, V_);
    int32_t token;
    if (p < g.prompt_length) {
      token = g.tokens[p];
    } else {
      ASSIGN_OR_RETURN(token, SampleToken(logits, config_.sampling, b, p));
      g.tokens.push_back(token);
    }
    if (config_.logprobs) g.logprobs.push_back(static_cast<float>(LogProbability(logits, token)));
    const int64_t generated = g.generated();
    if (p + 1 < g.prompt_length) return absl::OkStatus();
    if (generated > 0 && token == config_.eod) {
      g.finish = FinishReason::kEod;
    } else if (generated > 0 && stop_ &&
               stop_(b, absl::MakeConstSpan(g.tokens).subspan(g.prompt_length))) {
      g.finish = FinishReason::kStop;
    } else if (generated < config_.tokens_to_generate) {
      return absl::OkStatus();
    }
    done_[b] = true;
    return absl::OkStatus();
  }

  models::Model& model_;
  const GenerateConfig& config_;
  const StopCondition& stop_;
  const int64_t B_, V_, Vp_;
  std::vector<bool> done_;
  std::vector<Generation> out_;
  // The model's key/value cache when decoding through it (null: recomputing every prefix).
  models::IncrementalDecoder* decoder_ = nullptr;
  Tensor logits_;  // f32 [B, V_pad]: the logits of each sequence's latest position.
};

}  // namespace

absl::StatusOr<std::vector<Generation>> Generate(const nn::StepContext& sc, models::Model& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateConfig& config,
                                                 const StopCondition& stop) {
  RETURN_IF_ERROR(CheckGenerateArguments(model, prompts, config));
  Generator generator(model, prompts, config, stop);
  absl::StatusOr<std::vector<Generation>> result = generator.Run(sc);
  models::IncrementalDecoder* decoder = model.incremental_decoder();
  if (!result.ok() && decoder != nullptr) decoder->StopDecoding();
  return result;
}

}  // namespace serve
}  // namespace mt
