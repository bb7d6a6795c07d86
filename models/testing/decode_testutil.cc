#include "models/testing/decode_testutil.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "models/incremental_decoder.h"
#include "nn/cross_entropy.h"
#include "nn/modern_blocks_testutil.h"

namespace mt {
namespace models {
namespace testing {

ModelConfig SmallDecodingConfig(int64_t positions) {
  ModelConfig c = ModelConfig::Sized(Family::kGpt2, 2, 32, 4, 203, positions);
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.1f;  // Decoding runs in eval mode: never applied.
  c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

nn::LayerSpec RotarySpec() {
  nn::LayerSpec spec = nn::modern_testing::ModernSpec(32, 4, 48, nn::NormPosition::kPreNorm);
  spec.config.init_std = 0.2;
  return spec;
}

double DecodingBound(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : 16 * ::mt::testing::UnitRoundoff(dtype);
}

DecodingLm ForModel(Model* model, const nn::StepContext* sc) {
  DecodingLm lm;
  lm.vocab = model->config().vocab_size;
  lm.padded_vocab = model->padded_vocab();
  lm.logits = [model, sc](const TensorView& tokens, const TensorView& full) {
    return model->Logits(*sc, tokens, full);
  };
  lm.start = [model, sc](int64_t batch, int64_t max_length) -> absl::Status {
    ASSIGN_OR_RETURN(IncrementalDecoder * decoder, IncrementalDecoderOf(*model));
    return decoder->StartDecoding(*sc, batch, max_length);
  };
  lm.step = [model, sc](const TensorView& tokens, const TensorView& logits) -> absl::Status {
    ASSIGN_OR_RETURN(IncrementalDecoder * decoder, IncrementalDecoderOf(*model));
    return decoder->DecodeStep(*sc, tokens, logits);
  };
  return lm;
}

std::vector<std::vector<int32_t>> RandomPrompts(int B, int length, int64_t vocab, uint64_t seed) {
  const Tensor r = ::mt::testing::RandomInts({B, length}, DType::kI32, seed, 0, vocab);
  std::vector<std::vector<int32_t>> prompts(B);
  for (int b = 0; b < B; ++b) {
    prompts[b].assign(r.data_as<int32_t>() + b * length, r.data_as<int32_t>() + (b + 1) * length);
  }
  return prompts;
}

namespace {

// The first index of the largest value, and the gap to the second largest.
std::pair<int64_t, double> ArgmaxAndGap(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t v = 1; v < n; ++v) best = row[v] > row[best] ? v : best;
  double second = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < n; ++v) {
    if (v != best) second = std::max(second, static_cast<double>(row[v]));
  }
  return {best, row[best] - second};
}

// Host i32 [B, T] of the first T tokens of every sequence (T = -1: the last token only).
Tensor Tokens(const std::vector<std::vector<int32_t>>& seqs, int64_t T) {
  const int64_t B = static_cast<int64_t>(seqs.size()), n = T < 0 ? 1 : T;
  Tensor t = Tensor::Host({B, n}, DType::kI32);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* from = T < 0 ? seqs[b].data() + seqs[b].size() - 1 : seqs[b].data();
    std::copy_n(from, n, t.data_as<int32_t>() + b * n);
  }
  return t;
}

}  // namespace

GreedyResult ExpectGreedyDecodingMatchesRecompute(const DecodingLm& lm,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int steps, double bound,
                                                  const std::string& label) {
  GreedyResult r;
  r.tokens = prompts;
  const int64_t B = static_cast<int64_t>(prompts.size()), P = prompts[0].size();
  const int64_t V = lm.vocab, Vp = lm.padded_vocab;
  const absl::Status started = lm.start(B, P + steps);
  EXPECT_TRUE(started.ok()) << label << ": " << started;
  Tensor cached = ::mt::testing::NaNTensor({B, Vp}, DType::kF32);
  absl::Status s = lm.step(Tokens(r.tokens, P).view(), cached.view());
  EXPECT_TRUE(s.ok()) << label << ": " << s;
  if (!started.ok() || !s.ok()) return r;
  for (int step = 0; step < steps; ++step) {
    const int64_t T = P + step;
    Tensor full = ::mt::testing::NaNTensor({B * T, Vp}, DType::kF32);
    s = lm.logits(Tokens(r.tokens, T).view(), full.view());
    EXPECT_TRUE(s.ok()) << label << ": " << s;
    if (!s.ok()) return r;
    double peak = 0;
    for (int64_t b = 0; b < B; ++b) {
      const float* want = full.data_as<float>() + ((b + 1) * T - 1) * Vp;
      for (int64_t v = 0; v < V; ++v) peak = std::max(peak, std::fabs(double{want[v]}));
    }
    EXPECT_GT(peak, 0.0) << label;
    for (int64_t b = 0; b < B; ++b) {
      const float* want = full.data_as<float>() + ((b + 1) * T - 1) * Vp;
      const float* got = cached.data_as<float>() + b * Vp;
      for (int64_t v = 0; v < V; ++v) {
        const double e = std::fabs(double{got[v]} - want[v]);  // NaN fails the check below.
        r.worst_error = std::max(r.worst_error, e / peak);
        if (!(e <= bound * peak)) {
          ADD_FAILURE() << label << ": step " << step << " sequence " << b << " token " << v
                        << " cached " << got[v] << " recomputed " << want[v] << " (bound "
                        << bound * peak << ")";
          return r;
        }
      }
      const auto [cached_pick, unused] = ArgmaxAndGap(got, V);
      const auto [recomputed_pick, gap] = ArgmaxAndGap(want, V);
      if (cached_pick != recomputed_pick) {
        ++r.near_ties;
        EXPECT_LE(gap, 2 * bound * peak)
            << label << ": step " << step << " sequence " << b << " picks " << cached_pick
            << " (cached) and " << recomputed_pick << " (recomputed)";
      }
      r.tokens[b].push_back(static_cast<int32_t>(cached_pick));
    }
    if (step + 1 == steps) break;
    s = lm.step(Tokens(r.tokens, -1).view(), cached.view());
    EXPECT_TRUE(s.ok()) << label << ": " << s;
    if (!s.ok()) return r;
  }
  EXPECT_LE(4 * r.near_ties, B * steps) << label << ": too many near ties to compare the picks";
  std::printf(
      "%s: %d steps x %lld sequences, worst cached logit error %.3g of the peak, %d near "
      "ties\n",
      label.c_str(), steps, static_cast<long long>(B), r.worst_error, r.near_ties);
  return r;
}

// ---------------------------------------------------------------- TinyLm

absl::StatusOr<std::unique_ptr<TinyLm>> TinyLm::Create(nn::ParameterStore* store,
                                                       const nn::LayerSpec& spec, int layers,
                                                       int64_t vocab, int64_t padded_vocab) {
  std::unique_ptr<TinyLm> m(new TinyLm());
  m->dtype_ = store->compute_dtype();
  m->hidden_ = spec.config.hidden;
  ASSIGN_OR_RETURN(m->word_,
                   nn::VocabParallelEmbedding::Create(store, "embedding.word", vocab, padded_vocab,
                                                      m->hidden_, spec.config.init_std));
  ASSIGN_OR_RETURN(m->stack_, nn::TransformerStack::Create(store, "layers", layers, spec));
  ASSIGN_OR_RETURN(m->final_norm_,
                   nn::RmsNormModule::Create(store, "final_norm", m->hidden_, 1e-5f));
  return m;
}

absl::StatusOr<Tensor> TinyLm::Embed(const nn::StepContext& sc, const TensorView& tokens) {
  const ExecContext& ec = *sc.exec;
  Tensor staging;
  ASSIGN_OR_RETURN(TensorView ids, OnDevice(ec, tokens, &staging, "TinyLm: tokens"));
  ASSIGN_OR_RETURN(Tensor emb, Alloc(ec, {tokens.dim(0), tokens.dim(1), hidden_}, dtype_));
  ASSIGN_OR_RETURN(TensorView emb2, emb.view().Reshape({tokens.numel(), hidden_}));
  RETURN_IF_ERROR(word_.Forward(sc, ids, emb2));
  return emb;
}

absl::Status TinyLm::Head(const nn::StepContext& sc, const TensorView& h, const TensorView& full) {
  const ExecContext& ec = *sc.exec;
  const int64_t N = h.dim(0);
  ASSIGN_OR_RETURN(Tensor normed, Alloc(ec, {N, hidden_}, dtype_));
  ASSIGN_OR_RETURN(Tensor shard, Alloc(ec, {N, word_.local_vocab()}, DType::kF32));
  ASSIGN_OR_RETURN(Tensor gathered, Alloc(ec, {N, padded_vocab()}, DType::kF32));
  RETURN_IF_ERROR(final_norm_.Forward(sc, h, normed.view()));
  RETURN_IF_ERROR(word_.LogitsForward(sc, normed.view(), shard.view()));
  RETURN_IF_ERROR(nn::GatherLogits(sc, shard.view(), gathered.view()));
  return CopyTensor(ec, gathered.view(), full);
}

absl::Status TinyLm::Logits(const nn::StepContext& sc, const TensorView& tokens,
                            const TensorView& full) {
  ASSIGN_OR_RETURN(Tensor emb, Embed(sc, tokens));
  ASSIGN_OR_RETURN(TensorView h, stack_->Forward(sc, emb.view(), /*padding_mask=*/nullptr));
  return Head(sc, h.Flatten2D(), full);
}

absl::Status TinyLm::StartDecoding(const nn::StepContext& sc, int64_t batch, int64_t max_length) {
  return stack_->StartDecoding(sc, batch, max_length);
}

absl::Status TinyLm::DecodeStep(const nn::StepContext& sc, const TensorView& tokens,
                                const TensorView& logits) {
  const int64_t B = tokens.dim(0), n = tokens.dim(1), Vp = padded_vocab();
  ASSIGN_OR_RETURN(Tensor emb, Embed(sc, tokens));
  ASSIGN_OR_RETURN(TensorView h, stack_->DecodeForward(sc, emb.view()));
  // Every new position's logits, then each sequence's last row.
  Tensor all = Tensor::Host({B * n, Vp}, DType::kF32);
  RETURN_IF_ERROR(Head(sc, h.Flatten2D(), all.view()));
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(all.data_as<float>() + (b * n + n - 1) * Vp, Vp, logits.data_as<float>() + b * Vp);
  }
  return absl::OkStatus();
}

DecodingLm TinyLm::Calls(const nn::StepContext* sc) {
  DecodingLm lm;
  lm.vocab = vocab();
  lm.padded_vocab = padded_vocab();
  lm.logits = [this, sc](const TensorView& tokens, const TensorView& full) {
    return Logits(*sc, tokens, full);
  };
  lm.start = [this, sc](int64_t batch, int64_t max_length) {
    return StartDecoding(*sc, batch, max_length);
  };
  lm.step = [this, sc](const TensorView& tokens, const TensorView& logits) {
    return DecodeStep(*sc, tokens, logits);
  };
  return lm;
}

}  // namespace testing
}  // namespace models
}  // namespace mt
