#include "core/openblas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mt {
namespace {

// Debian's runtime name (libopenblas0-pthread or -openmp, through update-alternatives).
constexpr char kLibrary[] = "libopenblas.so.0";
constexpr char kCoreTypeVariable[] = "OPENBLAS_CORETYPE";

// "OpenBLAS 0.3.21" from openblas_get_config()'s "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...".
std::string VersionFromConfig(const char* config) {
  if (config == nullptr) return "OpenBLAS";
  std::vector<std::string> words = absl::StrSplit(config, ' ', absl::SkipEmpty());
  if (words.size() >= 2 && words[0] == "OpenBLAS") return absl::StrCat(words[0], " ", words[1]);
  return "OpenBLAS";
}

absl::Status Resolve(void* handle, const char* name, void** out) {
  *out = dlsym(handle, name);
  if (*out != nullptr) return absl::OkStatus();
  const char* error = dlerror();
  return absl::FailedPreconditionError(
      absl::StrCat(kLibrary, " has no ", name, ": ", error != nullptr ? error : "(no dlerror)"));
}

// dlopen()s the library with OPENBLAS_CORETYPE set as `blas->choice` says, then resolves the
// functions; fills `blas` (status included).
void Load(OpenBlas* blas) {
  // Already loaded by someone else (a library linking it): its core was fixed at that time.
  if (void* early = dlopen(kLibrary, RTLD_NOW | RTLD_NOLOAD); early != nullptr) {
    blas->loaded_before = true;
    dlclose(early);
  }
  const char* core = blas->choice.core;
  if (core != nullptr) setenv(kCoreTypeVariable, core, /*overwrite=*/1);
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  const char* open_error = handle == nullptr ? dlerror() : nullptr;
  if (core != nullptr) unsetenv(kCoreTypeVariable);  // Ours, not the user's: never inherited.
  if (handle == nullptr) {
    blas->status = absl::FailedPreconditionError(absl::StrCat(
        "cannot load ", kLibrary, ": ", open_error != nullptr ? open_error : "(no dlerror)",
        " (install libopenblas0, e.g. with tools/setup.sh)"));
    return;
  }
  void *sgemm = nullptr, *threads = nullptr, *corename = nullptr, *config = nullptr;
  const std::pair<const char*, void**> symbols[] = {{"sgemm_", &sgemm},
                                                    {"openblas_set_num_threads", &threads},
                                                    {"openblas_get_corename", &corename},
                                                    {"openblas_get_config", &config}};
  for (const auto& [symbol, out] : symbols) {
    blas->status = Resolve(handle, symbol, out);
    if (!blas->status.ok()) return;
  }
  blas->sgemm = reinterpret_cast<decltype(blas->sgemm)>(sgemm);
  blas->set_num_threads = reinterpret_cast<decltype(blas->set_num_threads)>(threads);
  const char* name = reinterpret_cast<char* (*)()>(corename)();
  blas->core = name != nullptr ? name : "";
  blas->version = VersionFromConfig(reinterpret_cast<char* (*)()>(config)());
}

// The process's library, loaded on the first call with `features`. Never destroyed: GEMMs may
// run in other static objects' destructors.
const OpenBlas& Instance(const CpuFeatures& features) {
  static const OpenBlas* const blas = [&] {
    auto* b = new OpenBlas;
    b->features = features;
    const char* user = std::getenv(kCoreTypeVariable);
    b->choice = ChooseOpenBlasCore(features, user);
    if (user != nullptr) b->user_coretype = user;
    Load(b);
    return b;
  }();
  return *blas;
}

}  // namespace

const char* OpenBlasCoreForFeatures(const CpuFeatures& f) {
  if (f.UsableAvx512()) return "SkylakeX";
  if (f.UsableAvx2Fma()) return "Haswell";
  if (f.UsableAvx()) return "Sandybridge";
  return nullptr;
}

OpenBlasCoreChoice ChooseOpenBlasCore(const CpuFeatures& f, const char* user_coretype) {
  if (user_coretype != nullptr) return {nullptr, BlasCoreSource::kUser};
  const char* core = OpenBlasCoreForFeatures(f);
  if (core == nullptr) return {nullptr, BlasCoreSource::kOpenBlas};
  return {core, BlasCoreSource::kCpuFeatures};
}

const OpenBlas& LoadOpenBlas() {
  // DetectCpuFeatures() is cheap, but only the first call needs it.
  static const OpenBlas& blas = Instance(DetectCpuFeatures());
  return blas;
}

const OpenBlas& LoadOpenBlasFor(const CpuFeatures& features) { return Instance(features); }

std::string DescribeBlas(const OpenBlas& blas) {
  if (!blas.status.ok()) return absl::StrCat("OpenBLAS not loaded: ", blas.status.message());
  std::string why;
  switch (blas.choice.source) {
    case BlasCoreSource::kCpuFeatures:
      why = absl::StrCat("chosen from CPU features: ", CpuFeaturesString(blas.features));
      break;
    case BlasCoreSource::kUser:
      why = absl::StrCat(kCoreTypeVariable, "=", blas.user_coretype, " set by the user");
      break;
    case BlasCoreSource::kOpenBlas:
      why =
          absl::StrCat("OpenBLAS's own choice; no usable AVX: ", CpuFeaturesString(blas.features));
      break;
  }
  if (blas.loaded_before) {
    absl::StrAppend(&why, "; but ", kLibrary, " was loaded before the choice, which came too late");
  } else if (blas.choice.core != nullptr && blas.core != blas.choice.core) {
    absl::StrAppend(&why, "; OpenBLAS did not take ", blas.choice.core);
  }
  return absl::StrCat(blas.version, ", core ", blas.core, " (", why, ")");
}

std::string DescribeBlas() { return DescribeBlas(LoadOpenBlas()); }

}  // namespace mt
