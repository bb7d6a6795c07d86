// CreateModel's check that every vocabulary-sized parameter declares nn::ParamSpec::vocab_padded
// (what checkpoint resharding re-pads): an architecture with an undeclared or a wrongly declared
// one is refused naming the parameter, and every registered model passes at the TP degrees its
// heads allow.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "nn/parameter.h"

namespace mt {
namespace models {
namespace {

// GPT-2 with one extra parameter of shape [rows(padded vocabulary)], declared as `declared`.
absl::StatusOr<std::unique_ptr<Model>> Gpt2WithExtra(const ModelConfig& config,
                                                     nn::ParameterStore* store,
                                                     const ModelOptions& options, bool vocab_sized,
                                                     bool declared) {
  ModelConfig standard = config;
  standard.architecture.clear();
  ASSIGN_OR_RETURN(const Architecture gpt2, FindArchitecture("gpt2"));
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, gpt2.create(standard, store, options));
  const int64_t rows = vocab_sized ? config.PaddedVocab(store->tp_size()) : 8;
  RETURN_IF_ERROR(store
                      ->Add({"extra.bias",
                             {rows},
                             /*split_dim=*/0,
                             nn::Init::kZeros,
                             0.0,
                             /*weight_decay=*/false,
                             /*vocab_padded=*/declared})
                      .status());
  return model;
}

Architecture Undeclared() {
  return {"test-undeclared-vocab", Family::kGpt2, "a vocabulary-sized bias without vocab_padded",
          [](const ModelConfig& c, nn::ParameterStore* s, const ModelOptions& o) {
            return Gpt2WithExtra(c, s, o, /*vocab_sized=*/true, /*declared=*/false);
          }};
}
Architecture Misdeclared() {
  return {"test-misdeclared-vocab", Family::kGpt2, "vocab_padded on a tensor of 8 rows",
          [](const ModelConfig& c, nn::ParameterStore* s, const ModelOptions& o) {
            return Gpt2WithExtra(c, s, o, /*vocab_sized=*/false, /*declared=*/true);
          }};
}
Architecture Declared() {
  return {"test-declared-vocab", Family::kGpt2, "a vocabulary-sized bias with vocab_padded",
          [](const ModelConfig& c, nn::ParameterStore* s, const ModelOptions& o) {
            return Gpt2WithExtra(c, s, o, /*vocab_sized=*/true, /*declared=*/true);
          }};
}
MT_REGISTER_ARCHITECTURE(Undeclared);
MT_REGISTER_ARCHITECTURE(Misdeclared);
MT_REGISTER_ARCHITECTURE(Declared);

ModelConfig Tiny(const std::string& architecture) {
  ModelConfig c = ModelConfig::Sized(Family::kGpt2, 1, 16, 4, 61, 8);
  c.architecture = architecture;
  c.make_vocab_size_divisible_by = 8;
  return c;
}

TEST(VocabDeclarationTest, UndeclaredVocabularySizedParameterIsRefused) {
  for (int tp : {1, 2, 4}) {
    nn::ParameterStore store(0, tp);
    const auto model = CreateModel(Tiny("test-undeclared-vocab"), &store);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << tp;
    EXPECT_TRUE(
        absl::StrContains(model.status().message(), "parameter 'extra.bias' is vocabulary-sized"))
        << model.status();
  }
}

TEST(VocabDeclarationTest, MisdeclaredParameterIsRefused) {
  nn::ParameterStore store(0, 2);
  const auto model = CreateModel(Tiny("test-misdeclared-vocab"), &store);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(model.status().message(), "parameter 'extra.bias' declares vocab_padded"))
      << model.status();
}

TEST(VocabDeclarationTest, DeclaredParameterIsAccepted) {
  nn::ParameterStore store(0, 2);
  EXPECT_TRUE(CreateModel(Tiny("test-declared-vocab"), &store).ok());
}

// Every registered model (specs only: nothing is allocated) at every TP degree up to 8 that its
// heads and FFN allow.
TEST(VocabDeclarationTest, EveryRegisteredModelDeclaresItsVocabularyTensors) {
  int built = 0;
  for (const RegisteredModel& m : RegisteredModels()) {
    for (int tp : {1, 2, 4, 8}) {
      if (!m.config.ValidateParallel(tp).ok()) continue;
      nn::ParameterStore store(0, tp);
      const auto model = CreateModel(m.config, &store);
      EXPECT_TRUE(model.ok()) << m.name << " at TP " << tp << ": " << model.status();
      int vocab_sized = 0;
      for (int i = 0; i < store.size(); ++i) vocab_sized += store.spec(i).vocab_padded;
      EXPECT_GE(vocab_sized, 1) << m.name;  // At least the word embedding.
      ++built;
    }
  }
  EXPECT_GT(built, 0);
}

}  // namespace
}  // namespace models
}  // namespace mt
