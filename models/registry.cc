#include "models/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace models {

namespace {

// Filled only during static initialisation (see registry.h).
template <typename Fn>
std::vector<Fn>& Registrations() {
  static auto* fns = new std::vector<Fn>();
  return *fns;
}

// Every entry the registration functions return, sorted by name; a name registered twice is a
// programming error (two packages claiming it).
template <typename Entry, typename Fn>
std::vector<Entry> Collect() {
  std::vector<Entry> all;
  for (Fn fn : Registrations<Fn>()) {
    if constexpr (std::is_same_v<Entry, Architecture>) {
      all.push_back(fn());
    } else {
      for (Entry& e : fn()) all.push_back(std::move(e));
    }
  }
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (size_t i = 1; i < all.size(); ++i) {
    CHECK(all[i].name != all[i - 1].name) << "'" << all[i].name << "' registered twice";
  }
  return all;
}

template <typename Entry>
absl::StatusOr<Entry> Find(const std::vector<Entry>& all, const std::string& name,
                           const char* what) {
  for (const Entry& e : all) {
    if (e.name == name) return e;
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown ", what, " '", name, "'; registered: ",
      absl::StrJoin(all, ", ", [](std::string* out, const Entry& e) { out->append(e.name); })));
}

using ArchitectureFn = Architecture (*)();
using ModelsFn = std::vector<RegisteredModel> (*)();

// Every vocabulary-sized parameter must declare itself (nn::ParamSpec::vocab_padded), so that
// checkpoint resharding, which re-pads exactly those, cannot miss one. Which parameters follow the
// padded vocabulary is found by building the architecture a second time, specs only, at TP=1 with
// a vocabulary padded one row further: the parameters whose global shape changes are exactly the
// vocabulary-sized ones, and they must differ in dimension 0 only.
// The model's parameters are the store's from handle `first` on (a store may hold several
// pipeline chunks).
absl::Status CheckVocabDeclarations(const Architecture& arch, const ModelConfig& config,
                                    const nn::ParameterStore& store, const ModelOptions& options,
                                    int first) {
  const int64_t padded = config.PaddedVocab(store.tp_size());
  ModelConfig wider = config;
  wider.make_vocab_size_divisible_by = padded + 1;  // Pads vocab_size <= padded to padded + 1.
  nn::ParameterStore scratch(/*tp_rank=*/0, /*tp_size=*/1);
  ModelOptions serial = options;
  serial.sequence_parallel = false;  // Needs TP > 1; declares the same parameters.
  ASSIGN_OR_RETURN(const std::unique_ptr<Model> unused, arch.create(wider, &scratch, serial));
  const std::string where = absl::StrCat("architecture '", arch.name, "': parameter '");
  if (scratch.size() != store.size() - first) {
    return absl::InternalError(absl::StrCat("architecture '", arch.name,
                                            "' declares a different number of parameters when "
                                            "only the vocabulary padding changes"));
  }
  for (int i = first; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    ASSIGN_OR_RETURN(const int j, scratch.Find(spec.name));
    const Shape& other = scratch.spec(j).global_shape;
    const bool follows = other != spec.global_shape;
    if (follows && !spec.vocab_padded) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, spec.name, "' is vocabulary-sized (its global shape follows the padded ",
          "vocabulary) but its ParamSpec does not declare vocab_padded, so resharding a ",
          "checkpoint would not re-pad it"));
    }
    if (!spec.vocab_padded) continue;
    Shape expected = spec.global_shape;  // Dimension 0 one row longer, nothing else changed.
    const bool padded_rows = !expected.empty() && expected[0] == padded;
    if (padded_rows) expected[0] = padded + 1;
    if (!padded_rows || other != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, spec.name, "' declares vocab_padded, but its dimension 0 is not ",
                       "the padded vocabulary (or another dimension follows it too): ",
                       ShapeToString(spec.global_shape), " at padded vocabulary ", padded));
    }
  }
  return absl::OkStatus();
}

}  // namespace

namespace internal {
int RegisterArchitecture(ArchitectureFn fn) {
  Registrations<ArchitectureFn>().push_back(fn);
  return 0;
}
int RegisterModels(ModelsFn fn) {
  Registrations<ModelsFn>().push_back(fn);
  return 0;
}
}  // namespace internal

std::vector<Architecture> RegisteredArchitectures() {
  return Collect<Architecture, ArchitectureFn>();
}

std::vector<RegisteredModel> RegisteredModels() { return Collect<RegisteredModel, ModelsFn>(); }

absl::StatusOr<Architecture> FindArchitecture(const std::string& name) {
  return Find(RegisteredArchitectures(), name, "architecture");
}

absl::StatusOr<RegisteredModel> FindModel(const std::string& name) {
  return Find(RegisteredModels(), name, "model");
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config,
                                                   nn::ParameterStore* store,
                                                   const ModelOptions& options) {
  RETURN_IF_ERROR(config.ValidateParallel(store->tp_size()));
  ASSIGN_OR_RETURN(const Architecture arch, FindArchitecture(config.ArchitectureName()));
  if (arch.family != config.family) {
    return absl::InvalidArgumentError(
        absl::StrCat("architecture '", arch.name, "' is of the ", FamilyArchitecture(arch.family),
                     " family, but the config's family is ", FamilyArchitecture(config.family)));
  }
  if (config.num_experts > 0 && !arch.has_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "architecture '", arch.name, "' has no experts, but num_experts is ", config.num_experts,
        "; use an architecture with experts (--model=moe-tiny) or --num_experts=0"));
  }
  if (config.rotary_base != ModelConfig().rotary_base && !arch.has_rotary) {
    return absl::InvalidArgumentError(absl::StrCat(
        "architecture '", arch.name, "' has no rotary position embeddings, but rotary_base is ",
        config.rotary_base, " (not the default ", ModelConfig().rotary_base,
        "); use an architecture with them (--model=modern-decoder-tiny) or drop rotary_base"));
  }
  const int first = store->size();
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, arch.create(config, store, options));
  RETURN_IF_ERROR(CheckVocabDeclarations(arch, config, *store, options, first));
  return model;
}

}  // namespace models
}  // namespace mt
