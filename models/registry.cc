#include "models/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace mt {
namespace models {

namespace {
// Filled only during static initialisation (see registry.h).
std::vector<std::vector<RegisteredModel> (*)()>& Registrations() {
  static auto* fns = new std::vector<std::vector<RegisteredModel> (*)()>();
  return *fns;
}
}  // namespace

namespace internal {
int RegisterModels(std::vector<RegisteredModel> (*fn)()) {
  Registrations().push_back(fn);
  return 0;
}
}  // namespace internal

std::vector<RegisteredModel> RegisteredModels() {
  std::vector<RegisteredModel> all;
  for (auto fn : Registrations()) {
    for (RegisteredModel& m : fn()) all.push_back(std::move(m));
  }
  std::sort(all.begin(), all.end(),
            [](const RegisteredModel& a, const RegisteredModel& b) { return a.name < b.name; });
  for (size_t i = 1; i < all.size(); ++i) {
    CHECK(all[i].name != all[i - 1].name) << "model " << all[i].name << " registered twice";
  }
  return all;
}

absl::StatusOr<RegisteredModel> FindModel(const std::string& name) {
  std::vector<RegisteredModel> all = RegisteredModels();
  for (RegisteredModel& m : all) {
    if (m.name == name) return m;
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown model '", name, "'; registered: ",
      absl::StrJoin(all, ", ", [](std::string* out, const RegisteredModel& m) { out->append(m.name); })));
}

}  // namespace models
}  // namespace mt
