// A tiny GPT-2, BERT, Llama and Mistral written in Hugging Face's exact layout (random weights, f32
// / bf16 / f16 files, prefixed names, buffers), converted with ImportHfCheckpoint at TP = the
// number of MPI ranks (1 and 2), loaded with LoadModel on every rank, and run: our logits against
// an independent float64 implementation of Hugging Face's forward math (hf_reference.cc).
//
// Tolerance: the model computes in f32 (unit roundoff u = 2^-24) through ~10 roundings per layer
// (sums of at most 4H = 64 terms, LayerNorm, softmax, GeLU); errors grow with the depth. With
// 2 layers and O(1) activations, 64 u norm-wise relative (4e-6) leaves headroom over the ~5 u
// measured, while any layout error (a transposed or permuted tensor, a wrong GeLU form or
// epsilon) moves the logits by O(1) relative.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/hf_testutil.h"
#include "checkpoint/model_loading.h"
#include "comm/mpi_testutil.h"
#include "core/exec_context.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/model.h"

namespace mt {
namespace checkpoint {
namespace {

using ::mt::comm::testing::MpiTest;
using ::mt::testing::I32;
using testing::HfTestModel;
using testing::HfTestOptions;
using testing::HfWriteOptions;

constexpr double kU = 0x1p-24;
constexpr double kTolerance = 64 * kU;

// Writes `model` to a directory of this rank and converts it at TP = tp; returns our checkpoint.
std::string Convert(const HfTestModel& model, const HfWriteOptions& write, const std::string& name,
                    int rank, int tp) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name, "_np", tp, "_r", rank);
  EXPECT_TRUE(testing::WriteHfModel(model, dir + "/hf", write).ok());
  HfImportOptions o;
  o.input_dir = dir + "/hf";
  o.save_dir = dir + "/ckpt";
  o.tp_size = tp;
  absl::StatusOr<HfImportResult> r = ImportHfCheckpoint(o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) {
    EXPECT_TRUE(r->initialized.empty());
  }
  return o.save_dir;
}

double RelativeError(const std::vector<double>& got, const std::vector<double>& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d += (got[i] - want[i]) * (got[i] - want[i]);
    n += want[i] * want[i];
  }
  return std::sqrt(d / n);
}

std::vector<int> RandomIds(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> ids(n);
  for (int& id : ids) id = static_cast<int>(rng() % vocab);
  return ids;
}

nn::StepContext EvalContext(const ExecContext* ec, comm::Communicator* comm) {
  return nn::StepContext::Eval(ec, comm->size() > 1 ? comm : nullptr);
}

class HfLogitsTest : public MpiTest {};

TEST_F(HfLogitsTest, Gpt2LogitsMatchFloat64HuggingFace) {
  const int rank = comm_->rank(), tp = comm_->size();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    HfTestOptions opt;
    opt.dtype = dtype;
    opt.seed = 11;
    const HfTestModel hf = testing::TinyGpt2(opt);
    HfWriteOptions write;
    write.prefix = "transformer.";
    write.tied_copies = true;
    const std::string ckpt = Convert(hf, write, absl::StrCat("gpt2_", DTypeName(dtype)), rank, tp);
    ExecContext ec;
    absl::StatusOr<LoadedModel> m = LoadModel(ckpt, rank, tp, ec);
    ASSERT_TRUE(m.ok()) << m.status();
    const int B = 2, T = 7, V = static_cast<int>(opt.vocab);
    const std::vector<int> ids = RandomIds(B * T, V, 5);
    const int64_t padded = m->model->padded_vocab();
    Tensor full = Tensor::Host({B * T, padded}, DType::kF32);
    for (int64_t i = 0; i < full.numel(); ++i) full.data_as<float>()[i] = NAN;
    const Tensor tokens = I32(ids, {B, T});
    ASSERT_TRUE(m->model->Logits(EvalContext(&ec, comm_.get()), tokens.view(), full.view()).ok());
    const std::vector<double> want = testing::Gpt2Logits(hf, ids, B, T);
    std::vector<double> got;
    for (int n = 0; n < B * T; ++n) {
      for (int v = 0; v < V; ++v) got.push_back(full.data_as<float>()[n * padded + v]);
    }
    const double err = RelativeError(got, want);
    EXPECT_LE(err, kTolerance) << DTypeName(dtype) << " tp=" << tp;
    if (rank == 0) {
      std::printf("GPT-2 %s file, TP=%d: logits relative error %.3g (%.1f u)\n",
                  std::string(DTypeName(dtype)).c_str(), tp, err, err / kU);
    }
  }
}

// Llama (grouped-query attention: 4 heads sharing 2 key/value heads, untied lm_head, rope_theta
// 100 so that a wrong base moves the logits even at 7 positions; a sharded f32 file) and Mistral
// (multi-head, tied, rope_theta 1e6; bf16), head dim 8; Mixtral (4 experts, top 2, untied, GQA;
// f32) routed as Mixtral routes (hf_reference.cc).
TEST_F(HfLogitsTest, LlamaLogitsMatchFloat64HuggingFace) {
  const int rank = comm_->rank(), tp = comm_->size();
  struct Case {
    std::string type;
    DType dtype;
    int kv_heads;
    bool tie;
    double theta;
  };
  for (const Case& c :
       {Case{"llama", DType::kF32, 2, false, 100.0}, Case{"mistral", DType::kBF16, 4, true, 1e6},
        Case{"mixtral", DType::kF32, 2, false, 1e6}}) {
    HfTestOptions opt;
    opt.dtype = c.dtype;
    opt.seed = 13;
    opt.hidden = 32;
    opt.kv_heads = c.kv_heads;
    opt.tie = c.tie;
    opt.rope_theta = c.theta;
    const HfTestModel hf = testing::TinyLlama(opt, c.type);
    HfWriteOptions write;
    write.prefix = "model.";
    write.tied_copies = c.tie;
    write.shards = c.tie ? 1 : 2;
    const std::string ckpt = Convert(hf, write, c.type, rank, tp);
    ExecContext ec;
    absl::StatusOr<LoadedModel> m = LoadModel(ckpt, rank, tp, ec);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->checkpoint.config.untie_embeddings_and_output_weights, !c.tie);
    const int B = 2, T = 7, V = static_cast<int>(opt.vocab);
    const std::vector<int> ids = RandomIds(B * T, V, 8);
    const int64_t padded = m->model->padded_vocab();
    Tensor full = Tensor::Host({B * T, padded}, DType::kF32);
    for (int64_t i = 0; i < full.numel(); ++i) full.data_as<float>()[i] = NAN;
    const Tensor tokens = I32(ids, {B, T});
    ASSERT_TRUE(m->model->Logits(EvalContext(&ec, comm_.get()), tokens.view(), full.view()).ok());
    const std::vector<double> want = testing::LlamaLogits(hf, ids, B, T);
    std::vector<double> got;
    for (int n = 0; n < B * T; ++n) {
      for (int v = 0; v < V; ++v) got.push_back(full.data_as<float>()[n * padded + v]);
    }
    const double err = RelativeError(got, want);
    EXPECT_LE(err, kTolerance) << c.type << " tp=" << tp;
    if (rank == 0) {
      std::printf("%s %s file, TP=%d: logits relative error %.3g (%.1f u)\n", c.type.c_str(),
                  std::string(DTypeName(c.dtype)).c_str(), tp, err, err / kU);
    }
  }
}

// Cross-entropy of row n of logits [N, V] at `label`, in float64.
double CrossEntropy(const std::vector<double>& logits, int V, int n, int label) {
  double mx = logits[n * V];
  for (int v = 0; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
  double z = 0;
  for (int v = 0; v < V; ++v) z += std::exp(logits[n * V + v] - mx);
  return mx + std::log(z) - logits[n * V + label];
}

// BERT's MLM logits are not returned by the model; each position's loss with one label scored
// is the cross-entropy of its logits, so the per-position losses (at random labels) and the
// sentence-order loss (the NSP head) are compared with the float64 logits' cross-entropies.
TEST_F(HfLogitsTest, BertLossesMatchFloat64HuggingFace) {
  const int rank = comm_->rank(), tp = comm_->size();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    HfTestOptions opt;
    opt.dtype = dtype;
    opt.seed = 12;
    const HfTestModel hf = testing::TinyBert(opt, "gelu");
    HfWriteOptions write;
    write.prefix = "bert.";
    write.legacy_norm_names = true;
    write.tied_copies = true;
    const std::string ckpt = Convert(hf, write, absl::StrCat("bert_", DTypeName(dtype)), rank, tp);
    ExecContext ec;
    absl::StatusOr<LoadedModel> m = LoadModel(ckpt, rank, tp, ec);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->checkpoint.config.gelu, ops::GeluForm::kErf);
    const int B = 2, T = 7, V = static_cast<int>(opt.vocab);
    const std::vector<int> ids = RandomIds(B * T, V, 6), labels = RandomIds(B * T, V, 7);
    const std::vector<int> types = {0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1};
    const std::vector<int> mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
    const std::vector<int> sop = {1, 0};
    const testing::BertOutputs want = testing::BertForward(hf, ids, types, mask, B, T);
    const Tensor tokens = I32(ids, {B, T}), tt = I32(types, {B, T}), pm = I32(mask, {B, T});
    std::vector<double> got, ref;
    double sop_loss = 0;
    for (int n = 0; n < B * T; ++n) {
      if (mask[n] == 0) continue;
      std::vector<int> one(B * T, ops::kIgnoreIndex);
      one[n] = labels[n];
      const Tensor l = I32(one, {B, T});
      const Tensor sl = I32(sop, {B, 1});
      const TensorView sop_view = *sl.view().Reshape({B});
      absl::StatusOr<models::Losses> losses = m->model->ForwardBackward(
          EvalContext(&ec, comm_.get()),
          models::BertBatch(tokens.view(), tt.view(), pm.view(), l.view(), sop_view),
          models::Backward::kNo);
      ASSERT_TRUE(losses.ok()) << losses.status();
      got.push_back(losses->parts[0]);
      ref.push_back(CrossEntropy(want.mlm_logits, V, n, labels[n]));
      sop_loss = losses->parts[1];
    }
    const double sop_want = (CrossEntropy(want.nsp_logits, 2, 0, sop[0]) +
                             CrossEntropy(want.nsp_logits, 2, 1, sop[1])) /
                            2;
    const double err = RelativeError(got, ref);
    EXPECT_LE(err, kTolerance) << DTypeName(dtype) << " tp=" << tp;
    EXPECT_LE(std::fabs(sop_loss - sop_want), kTolerance * std::fabs(sop_want) + 8 * kU);
    if (rank == 0) {
      std::printf(
          "BERT %s file, TP=%d: MLM losses relative error %.3g (%.1f u), NSP loss %.3g vs %.3g\n",
          std::string(DTypeName(dtype)).c_str(), tp, err, err / kU, sop_loss, sop_want);
    }
  }
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt
