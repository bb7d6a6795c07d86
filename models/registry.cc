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
  return arch.create(config, store, options);
}

}  // namespace models
}  // namespace mt
