// The model registry. Two kinds of entries, both added by the package that defines them:
//
//   architectures  name -> (family, description, factory): the code that builds a Model from a
//                  ModelConfig. models/gpt2 registers "gpt2", models/bert "bert", and each variant
//                  package under models/variants/ its own (docs/adding_a_model.md).
//   models         name -> (description, config): named configurations, e.g. "gpt2-1.2b"; a
//                  config's `architecture` says which factory builds it.
//
// Every consumer builds models through CreateModel(config, store, options), so a binary can run
// any architecture it links, picked by --model=NAME, with no edit outside the variant's package.
// //models:all links every model package.
//
// Registration happens during static initialisation only (the MT_REGISTER_* macros in a .cc file
// of an alwayslink library); afterwards the registry is read-only, so it holds no mutable state
// that code could observe changing (the one deliberate static in the project: the alternative, a
// hand-maintained list of register calls, defeats adding a variant as a self-contained package).
#ifndef MT_MODELS_REGISTRY_H_
#define MT_MODELS_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/config.h"
#include "models/model.h"
#include "nn/parameter.h"

namespace mt {
namespace models {

// Declares the model's parameters in `store` (whose tp_size is the TP degree; not allocated, so
// factories also serve to count the parameters of large configs) and returns the model.
// InvalidArgument for a config the architecture cannot build (naming the field).
using ModelFactory = std::function<absl::StatusOr<std::unique_ptr<Model>>(
    const ModelConfig& config, nn::ParameterStore* store, const ModelOptions& options)>;

struct Architecture {
  std::string name;
  Family family = Family::kGpt2;  // Which data and drivers it trains with.
  std::string description;
  ModelFactory create;
  // Whether its layers can be mixtures of experts (ModelConfig::num_experts > 0); CreateModel
  // refuses experts for an architecture that has none rather than silently building it dense.
  bool has_experts = false;
  // Whether its attention rotates q and k (ModelConfig::rotary_base); CreateModel refuses a
  // rotary_base other than the default for an architecture without, rather than ignore it (a
  // converted checkpoint's rope_theta would otherwise be dropped silently).
  bool has_rotary = false;
};

struct RegisteredModel {
  std::string name;
  std::string description;
  ModelConfig config;
};

// Every registered architecture / model, sorted by name.
std::vector<Architecture> RegisteredArchitectures();
std::vector<RegisteredModel> RegisteredModels();
// NotFound listing the registered names.
absl::StatusOr<Architecture> FindArchitecture(const std::string& name);
absl::StatusOr<RegisteredModel> FindModel(const std::string& name);

// Builds config.ArchitectureName()'s model after ValidateParallel(store->tp_size()), then checks
// that its vocabulary-sized parameters declare nn::ParamSpec::vocab_padded (found by declaring the
// architecture's specs once more, at TP=1 with the vocabulary padded one row further: the
// parameters whose shape changes), so that checkpoint resharding cannot miss one.
// NotFound for an unregistered architecture (listing them: link its package, or //models:all);
// InvalidArgument when the config's family is not the architecture's, from the factory, or naming
// a parameter that is vocabulary-sized but undeclared (or declared but not vocabulary-sized).
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config,
                                                   nn::ParameterStore* store,
                                                   const ModelOptions& options = {});

namespace internal {
// Called by the MT_REGISTER_* macros during static initialisation; return dummies for them.
int RegisterArchitecture(Architecture (*fn)());
int RegisterModels(std::vector<RegisteredModel> (*fn)());
}  // namespace internal

}  // namespace models
}  // namespace mt

// Registers the architecture returned by `fn` (a function returning models::Architecture).
#define MT_REGISTER_ARCHITECTURE(fn)                 \
  static const int mt_architecture_registered_##fn = \
      ::mt::models::internal::RegisterArchitecture(fn)

// Registers the models returned by `fn` (a function returning std::vector<RegisteredModel>).
#define MT_REGISTER_MODELS(fn) \
  static const int mt_models_registered_##fn = ::mt::models::internal::RegisterModels(fn)

#endif  // MT_MODELS_REGISTRY_H_
