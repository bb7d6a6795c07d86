// Round trips of the Hugging Face converter (hf_checkpoint.h) and its errors:
//   HF -> ours -> HF reproduces every tensor bit for bit, in the source dtype, under canonical
//   names, from prefixed, legacy-named, sharded files with buffers and tied copies;
//   ours -> HF -> ours reproduces every parameter bit for bit (the vocabulary padding, which
//   Hugging Face's files do not hold, comes back zero) and the model config;
//   every bad input is one error naming the tensor or field.
#include "checkpoint/hf_checkpoint.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_testutil.h"
#include "checkpoint/hf_files.h"
#include "checkpoint/hf_testutil.h"
#include "checkpoint/model_loading.h"
#include "checkpoint/model_loading_testutil.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace {

using testing::FreshDir;
using testing::HfTestModel;
using testing::HfTestOptions;
using testing::HfWriteOptions;

absl::StatusOr<HfImportResult> Import(const std::string& hf, const std::string& save, int tp) {
  HfImportOptions o;
  o.input_dir = hf;
  o.save_dir = save;
  o.tp_size = tp;
  return ImportHfCheckpoint(o);
}

absl::StatusOr<HfExportResult> Export(const std::string& ckpt, const std::string& hf) {
  HfExportOptions o;
  o.load_dir = ckpt;
  o.save_dir = hf;
  return ExportHfCheckpoint(o);
}

// Every tensor of `exported` (one model.safetensors) is the model's, in its dtype, bit for bit,
// and there is no other.
void ExpectSameTensors(const HfTestModel& model, const std::string& exported) {
  absl::StatusOr<HfWeights> w = HfWeights::Open(exported);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<std::string> names = w->names();
  EXPECT_EQ(names.size(), model.tensors.size());
  for (const auto& [name, t] : model.tensors) {
    SCOPED_TRACE(name);
    ASSERT_NE(std::find(names.begin(), names.end(), name), names.end());
    const SafetensorsEntry& e = w->entry(name);
    EXPECT_EQ(e.dtype, model.dtype);
    EXPECT_EQ(e.shape, t.shape);
    absl::StatusOr<Tensor> got = w->ReadF32(name);
    ASSERT_TRUE(got.ok()) << got.status();
    int mismatches = 0;
    for (int64_t i = 0; i < got->numel(); ++i) {
      mismatches += got->data_as<float>()[i] != static_cast<float>(t.values[i]);
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(HfCheckpointTest, Gpt2HuggingFaceToOursToHuggingFaceReproducesEveryTensor) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    HfTestOptions opt;
    opt.dtype = dtype;
    const HfTestModel model = testing::TinyGpt2(opt);
    const std::string dir = FreshDir(absl::StrCat("gpt2_round_trip_", DTypeName(dtype)));
    HfWriteOptions write;
    write.prefix = "transformer.";
    write.tied_copies = true;
    write.shards = 3;
    ASSERT_TRUE(testing::WriteHfModel(model, dir + "/hf", write).ok());
    auto imported = Import(dir + "/hf", dir + "/ours", 2);
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_EQ(imported->source_dtype, dtype);
    auto exported = Export(dir + "/ours", dir + "/back");
    ASSERT_TRUE(exported.ok()) << exported.status();
    EXPECT_EQ(exported->dtype, dtype);
    ExpectSameTensors(model, dir + "/back");
    // The config reads back as the same model.
    auto again = Import(dir + "/back", dir + "/again", 1);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->config.model.ToJson(), imported->config.model.ToJson());
    EXPECT_EQ(again->config.eos_token_id, opt.vocab - 1);
  }
}

// Llama (grouped-query attention, untied lm_head, a sharded f32 file with "model." names and
// rotary inv_freq buffers), Mistral (tied, bf16, the lm_head copy in the file) and Mixtral (as
// the Llama, with 4 experts, top 2): HF -> ours at TP 2 -> HF gives every tensor back bit for bit,
// and config.json the same model and model_type.
TEST(HfCheckpointTest, LlamaHuggingFaceToOursToHuggingFaceReproducesEveryTensor) {
  for (const std::string type : {"llama", "mistral", "mixtral"}) {
    SCOPED_TRACE(type);
    const bool llama = type != "mistral";
    HfTestOptions opt;
    opt.dtype = llama ? DType::kF32 : DType::kBF16;
    opt.kv_heads = llama ? 2 : 4;
    opt.tie = !llama;
    opt.rope_theta = llama ? 500000.0 : 1e6;
    const HfTestModel model = testing::TinyLlama(opt, type);
    const std::string dir = FreshDir(absl::StrCat("llama_round_trip_", type));
    HfWriteOptions write;
    write.prefix = "model.";
    write.tied_copies = !llama;
    write.shards = llama ? 3 : 1;
    ASSERT_TRUE(testing::WriteHfModel(model, dir + "/hf", write).ok());
    auto imported = Import(dir + "/hf", dir + "/ours", 2);
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_EQ(imported->config.model.ArchitectureName(),
              type == "mixtral" ? "moe" : "modern-decoder");
    EXPECT_EQ(imported->config.model.rotary_base, opt.rope_theta);
    EXPECT_EQ(imported->config.model.query_groups(), opt.kv_heads);
    auto exported = Export(dir + "/ours", dir + "/back");
    ASSERT_TRUE(exported.ok()) << exported.status();
    EXPECT_EQ(exported->dtype, opt.dtype);
    ExpectSameTensors(model, dir + "/back");
    auto again = Import(dir + "/back", dir + "/again", 1);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->config.model.ToJson(), imported->config.model.ToJson());
    EXPECT_EQ(again->config.model_type, type);
    if (type == "mixtral") {
      EXPECT_EQ(again->config.model.num_experts, 4);
      EXPECT_EQ(again->config.model.moe_router_topk, 2);
      EXPECT_EQ(again->config.model.moe_aux_loss_coeff, 0.04);  // router_aux_loss_coef 0.02 x k.
    }
    EXPECT_EQ(again->config.eos_token_id, 2);
  }
}

TEST(HfCheckpointTest, OursToHuggingFaceToOursIsBitExact) {
  for (const std::string arch : {"gpt2", "bert", "modern-decoder"}) {
    SCOPED_TRACE(arch);
    const models::Family family = arch == "bert" ? models::Family::kBert : models::Family::kGpt2;
    // vocab 45 pads to 128 at any TP here; the pattern fills the padding rows too.
    models::ModelConfig config = testing::TinyConfig(family, 2, 4, 45, 128);
    if (family == models::Family::kBert) config.norm = nn::NormPosition::kPostNorm;
    if (arch == "modern-decoder") {  // Llama's shape: GQA, untied, its own rope_theta and eps.
      config.architecture = arch;
      config.position_embeddings = false;
      config.group_query_attention = true;
      config.num_query_groups = 2;
      config.untie_embeddings_and_output_weights = true;
      config.rotary_base = 250000.0;
      config.layernorm_eps = 1e-6f;
      config.hidden_dropout = config.attention_dropout = 0.0f;
    }
    const std::string dir = FreshDir(absl::StrCat("ours_round_trip_", config.ArchitectureName()));
    auto ranks = testing::BuildRanks(config, 2, /*seed=*/3);
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    for (testing::RankModel& r : *ranks) ASSERT_OK(testing::FillWithPattern(r.store.get()));
    ASSERT_TRUE(testing::SaveRanks(dir + "/ours", 5, config.ToJson(), "", *ranks,
                                   /*with_optimizer=*/true)
                    .ok());
    auto exported = Export(dir + "/ours", dir + "/hf");
    ASSERT_TRUE(exported.ok()) << exported.status();
    EXPECT_EQ(exported->dtype, DType::kF32);
    auto imported = Import(dir + "/hf", dir + "/again", 2);
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_TRUE(imported->initialized.empty());
    EXPECT_EQ(imported->config.model.ToJson(), config.ToJson());
    for (int tp : {1, 2}) {
      for (int rank = 0; rank < tp; ++rank) {
        auto m = LoadModel(dir + "/again", rank, tp, ExecContext{});
        ASSERT_TRUE(m.ok()) << m.status();
        EXPECT_TRUE(testing::HoldsPattern(*m->store, ExecContext{}, config.vocab_size));
      }
    }
  }
}

// Hugging Face's GPT-2 has no grouped-query attention: exporting a model with it is refused in
// one line naming it, before anything is written.
TEST(HfCheckpointTest, ExportRefusesGroupedQueryAttention) {
  models::ModelConfig config = testing::TinyConfig(models::Family::kGpt2, 1, 4, 45, 128);
  config.group_query_attention = true;
  config.num_query_groups = 2;
  const std::string dir = FreshDir("gqa_export");
  auto ranks = testing::BuildRanks(config, 1, /*seed=*/3);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  ASSERT_TRUE(testing::SaveRanks(dir + "/ours", 5, config.ToJson(), "", *ranks,
                                 /*with_optimizer=*/false)
                  .ok());
  const absl::Status s = Export(dir + "/ours", dir + "/hf").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(s.message(),
            "grouped-query attention (2 key/value heads): Hugging Face's GPT-2 and BERT cannot "
            "express this model");
}

// A GPT-2 directory with one change, converted: the error's code and what it must name.
struct BadCase {
  std::string what;
  absl::StatusCode code;
  std::string names;  // A substring the message must hold.
};

// Import's status on the model written with `write`; a fixture that cannot be written fails the
// test (and returns Internal, which no case expects).
absl::Status ConvertGpt2With(const std::string& name, HfTestModel model, HfWriteOptions write) {
  const std::string dir = FreshDir(name);
  const absl::Status written = testing::WriteHfModel(model, dir + "/hf", write);
  if (!written.ok()) {
    ADD_FAILURE() << "writing the fixture: " << written;
    return absl::InternalError("no fixture");
  }
  return Import(dir + "/hf", dir + "/ours", 1).status();
}

void ExpectError(const absl::Status& s, const BadCase& c) {
  SCOPED_TRACE(c.what);
  EXPECT_EQ(s.code(), c.code) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), c.names)) << s;
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos) << s;
}

TEST(HfCheckpointTest, BadInputsNameTheTensorOrField) {
  const HfTestModel good = testing::TinyGpt2({});
  {
    HfWriteOptions w;
    w.omit = {"h.1.mlp.c_fc.weight"};
    ExpectError(ConvertGpt2With("missing", good, w),
                {"missing tensor", absl::StatusCode::kNotFound, "h.1.mlp.c_fc.weight"});
  }
  {
    HfTestModel m = good;
    m.tensors["h.0.ln_2.bias"].shape = {15};
    m.tensors["h.0.ln_2.bias"].values.resize(15);
    ExpectError(ConvertGpt2With("shape", m, {}),
                {"wrong shape", absl::StatusCode::kInvalidArgument, "h.0.ln_2.bias"});
  }
  const std::vector<std::pair<std::pair<std::string, nlohmann::json>, BadCase>> configs = {
      {{"activation_function", "relu"},
       {"unknown activation", absl::StatusCode::kUnimplemented, "activation_function"}},
      {{"scale_attn_by_inverse_layer_idx", true},
       {"unsupported switch", absl::StatusCode::kUnimplemented, "scale_attn_by_inverse_layer_idx"}},
      {{"rotary_dim", 8}, {"unknown field", absl::StatusCode::kUnimplemented, "rotary_dim"}},
      {{"n_head", 5}, {"heads", absl::StatusCode::kInvalidArgument, "num_attention_heads"}},
      {{"n_embd", "16"}, {"wrong type", absl::StatusCode::kInvalidArgument, "n_embd"}},
      {{"tie_word_embeddings", false},
       {"untied", absl::StatusCode::kUnimplemented, "tie_word_embeddings"}},
  };
  for (const auto& [change, bad] : configs) {
    HfTestModel m = good;
    m.config[change.first] = change.second;
    ExpectError(ConvertGpt2With("config", m, {}), bad);
  }
  {
    HfTestModel m = good;
    m.config.erase("n_layer");
    ExpectError(ConvertGpt2With("no_layers", m, {}),
                {"missing field", absl::StatusCode::kInvalidArgument, "n_layer"});
  }
  {
    HfTestModel m = good;
    m.tensors["score.weight"] = m.tensors["ln_f.weight"];
    ExpectError(ConvertGpt2With("extra", m, {}),
                {"unknown tensor", absl::StatusCode::kUnimplemented, "score.weight"});
  }
  {
    // An output layer with other values than the embedding: untied.
    HfTestModel untied = good;
    untied.tensors["lm_head.weight"] = good.tensors.at("wte.weight");
    for (double& v : untied.tensors["lm_head.weight"].values) v = -v;
    ExpectError(ConvertGpt2With("untied", untied, {}),
                {"untied output", absl::StatusCode::kUnimplemented, "lm_head.weight"});
  }
  {
    const std::string dir = FreshDir("truncated");
    ASSERT_TRUE(testing::WriteHfModel(good, dir + "/hf").ok());
    const std::string path = dir + "/hf/model.safetensors";
    std::string bytes = testing::ReadText(path);
    testing::WriteText(path, bytes.substr(0, bytes.size() - 100));
    ExpectError(Import(dir + "/hf", dir + "/ours", 1).status(),
                {"truncated", absl::StatusCode::kDataLoss, "model.safetensors"});
  }
  {
    const std::string dir = FreshDir("pickle");
    ASSERT_TRUE(testing::WriteHfModel(good, dir + "/hf").ok());
    std::rename((dir + "/hf/model.safetensors").c_str(), (dir + "/hf/pytorch_model.bin").c_str());
    ExpectError(Import(dir + "/hf", dir + "/ours", 1).status(),
                {"pickle", absl::StatusCode::kFailedPrecondition, "safetensors"});
  }
  ExpectError(Import(FreshDir("empty"), FreshDir("empty_out"), 1).status(),
              {"no config", absl::StatusCode::kNotFound, "config.json"});
}

// What Llama / Mistral features the modern decoder cannot run is refused, naming the field.
TEST(HfCheckpointTest, LlamaBadInputsNameTheTensorOrField) {
  HfTestOptions opt;
  opt.kv_heads = 2;
  const HfTestModel good = testing::TinyLlama(opt, "mistral");
  const std::vector<std::pair<std::pair<std::string, nlohmann::json>, BadCase>> configs = {
      {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}},
       {"rope scaling", absl::StatusCode::kUnimplemented, "rope_scaling"}},
      {{"sliding_window", 4},
       {"sliding window", absl::StatusCode::kUnimplemented, "sliding_window"}},
      {{"hidden_act", "gelu"}, {"activation", absl::StatusCode::kUnimplemented, "hidden_act"}},
      {{"attention_bias", true},
       {"attention bias", absl::StatusCode::kUnimplemented, "attention_bias"}},
      {{"head_dim", 8}, {"head dim", absl::StatusCode::kUnimplemented, "head_dim"}},
      {{"num_key_value_heads", 3},
       {"groups", absl::StatusCode::kInvalidArgument, "num_query_groups"}},
      {{"pretraining_tp", 2},
       {"pretraining tp", absl::StatusCode::kUnimplemented, "pretraining_tp"}},
      {{"rope_theta", -1.0}, {"theta", absl::StatusCode::kInvalidArgument, "rope_theta"}},
  };
  for (const auto& [change, bad] : configs) {
    HfTestModel m = good;
    m.config[change.first] = change.second;
    ExpectError(ConvertGpt2With("llama_config", m, {}), bad);
  }
  {
    HfWriteOptions w;
    w.omit = {"lm_head.weight"};  // Untied: the output layer is required.
    ExpectError(ConvertGpt2With("llama_missing", good, w),
                {"missing lm_head", absl::StatusCode::kNotFound, "lm_head.weight"});
  }
  HfTestModel mixtral = testing::TinyLlama(opt, "mixtral");
  const std::vector<std::pair<std::pair<std::string, nlohmann::json>, BadCase>> moe = {
      {{"router_jitter_noise", 0.1},
       {"jitter", absl::StatusCode::kUnimplemented, "router_jitter_noise"}},
      {{"num_experts_per_tok", 5},
       {"top k", absl::StatusCode::kInvalidArgument, "num_experts_per_tok"}},
      {{"num_local_experts", 0},
       {"experts", absl::StatusCode::kInvalidArgument, "num_local_experts"}},
  };
  for (const auto& [change, bad] : moe) {
    HfTestModel m = mixtral;
    m.config[change.first] = change.second;
    ExpectError(ConvertGpt2With("mixtral_config", m, {}), bad);
  }
  {
    // A sliding window that covers every position is no window: accepted.
    HfTestModel m = good;
    m.config["sliding_window"] = opt.positions;
    EXPECT_TRUE(ConvertGpt2With("llama_window", m, {}).ok());
  }
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt
