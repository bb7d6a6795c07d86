// The model registry: name -> (description, config). A model package registers its configs with
// MT_REGISTER_MODELS in a .cc file of an alwayslink library; a binary sees every model package it
// links (//models:all links all of them). A new variant is a new Bazel package with one such file.
//
// Registration happens during static initialisation only; afterwards the registry is read-only, so
// it holds no mutable state that code could observe changing (the one deliberate static in the
// project: the alternative, a hand-maintained list of register calls, defeats adding a variant as
// a self-contained package).
#ifndef MT_MODELS_REGISTRY_H_
#define MT_MODELS_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/config.h"

namespace mt {
namespace models {

struct RegisteredModel {
  std::string name;
  std::string description;
  ModelConfig config;
};

// Every registered model, sorted by name.
std::vector<RegisteredModel> RegisteredModels();
// NotFound listing the registered names.
absl::StatusOr<RegisteredModel> FindModel(const std::string& name);

namespace internal {
// Called by MT_REGISTER_MODELS during static initialisation; returns a dummy for the macro.
int RegisterModels(std::vector<RegisteredModel> (*fn)());
}  // namespace internal

}  // namespace models
}  // namespace mt

// Registers the models returned by `fn` (a function returning std::vector<RegisteredModel>).
#define MT_REGISTER_MODELS(fn) \
  static const int mt_models_registered_##fn = ::mt::models::internal::RegisterModels(fn)

#endif  // MT_MODELS_REGISTRY_H_
