#include "core/openblas.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cpu_features_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

using testing::Avx512CpuFeatures;

std::string CoreFor(const CpuFeatures& f) {
  const char* core = OpenBlasCoreForFeatures(f);
  return core != nullptr ? core : "(none)";
}

TEST(OpenBlasCoreTest, MapsFeatureSetsToKernelTiers) {
  EXPECT_EQ(CoreFor(Avx512CpuFeatures()), "SkylakeX");
  // Each of the four AVX-512 subsets is needed; without one it is the AVX2 tier.
  for (bool CpuFeatures::*bit : {&CpuFeatures::avx512f, &CpuFeatures::avx512bw,
                                 &CpuFeatures::avx512vl, &CpuFeatures::avx512dq}) {
    CpuFeatures f = Avx512CpuFeatures();
    f.*bit = false;
    EXPECT_EQ(CoreFor(f), "Haswell");
  }
  CpuFeatures f = Avx512CpuFeatures();
  f.os_zmm = false;  // The OS does not save the ZMM registers.
  EXPECT_EQ(CoreFor(f), "Haswell");
  f.fma = false;  // AVX2 without FMA (no such CPU, but the bits decide).
  EXPECT_EQ(CoreFor(f), "Sandybridge");
  f = Avx512CpuFeatures();
  f.avx2 = false;
  EXPECT_EQ(CoreFor(f), "Sandybridge");
  f.os_ymm = false;  // AVX the OS has not enabled: nothing to choose.
  EXPECT_EQ(CoreFor(f), "(none)");
  f = Avx512CpuFeatures();
  f.osxsave = false;
  EXPECT_EQ(CoreFor(f), "(none)");
  CpuFeatures sse_only;
  sse_only.sse3 = true;
  EXPECT_EQ(CoreFor(sse_only), "(none)");
}

TEST(OpenBlasCoreTest, TheUsersSettingWins) {
  for (const char* user : {"Haswell", "prescott", "", "NoSuchCore"}) {
    const OpenBlasCoreChoice c = ChooseOpenBlasCore(Avx512CpuFeatures(), user);
    EXPECT_EQ(c.core, nullptr) << user;
    EXPECT_EQ(c.source, BlasCoreSource::kUser) << user;
  }
  const OpenBlasCoreChoice ours = ChooseOpenBlasCore(Avx512CpuFeatures(), nullptr);
  EXPECT_STREQ(ours.core, "SkylakeX");
  EXPECT_EQ(ours.source, BlasCoreSource::kCpuFeatures);
  const OpenBlasCoreChoice none = ChooseOpenBlasCore(CpuFeatures{}, nullptr);
  EXPECT_EQ(none.core, nullptr);
  EXPECT_EQ(none.source, BlasCoreSource::kOpenBlas);
}

TEST(OpenBlasCoreTest, DescribesTheCoreAndWhoChoseIt) {
  OpenBlas b;
  b.version = "OpenBLAS 0.3.21";
  b.features = Avx512CpuFeatures();
  b.choice = {"SkylakeX", BlasCoreSource::kCpuFeatures};
  b.core = "SkylakeX";
  EXPECT_EQ(DescribeBlas(b),
            "OpenBLAS 0.3.21, core SkylakeX (chosen from CPU features: avx512f avx512bw avx512vl "
            "avx512dq avx2 fma avx sse3)");
  b.core = "Prescott";
  EXPECT_EQ(DescribeBlas(b),
            "OpenBLAS 0.3.21, core Prescott (chosen from CPU features: avx512f avx512bw avx512vl "
            "avx512dq avx2 fma avx sse3; OpenBLAS did not take SkylakeX)");
  b.loaded_before = true;
  EXPECT_NE(DescribeBlas(b).find("was loaded before the choice"), std::string::npos);
  b = OpenBlas();
  b.version = "OpenBLAS 0.3.21";
  b.choice = {nullptr, BlasCoreSource::kUser};
  b.user_coretype = "Haswell";
  b.core = "Haswell";
  EXPECT_EQ(DescribeBlas(b),
            "OpenBLAS 0.3.21, core Haswell (OPENBLAS_CORETYPE=Haswell set by "
            "the user)");
  b.status = absl::FailedPreconditionError("cannot load libopenblas.so.0");
  EXPECT_EQ(DescribeBlas(b), "OpenBLAS not loaded: cannot load libopenblas.so.0");
}

// ---- Loads: each in a child process (a process loads OpenBLAS once), which prints the
// description to stderr and exits with 0 iff OpenBLAS reports `expected_core` ("" for any),
// the choice came from `expected_source`, and OPENBLAS_CORETYPE is `expected_env` afterwards
// (null: unset). The parent never loads OpenBLAS itself.
void LoadInChild(const CpuFeatures& f, const char* expected_core, BlasCoreSource expected_source,
                 const char* expected_env) {
  const OpenBlas& blas = LoadOpenBlasFor(f);
  std::fprintf(stderr, "%s\n", DescribeBlas(blas).c_str());
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const bool env_ok = expected_env == nullptr
                          ? env == nullptr
                          : env != nullptr && std::strcmp(env, expected_env) == 0;
  const bool core_ok = *expected_core == '\0' ? !blas.core.empty() : blas.core == expected_core;
  const bool sgemm_ok =
      blas.status.ok() && blas.sgemm != nullptr && blas.set_num_threads != nullptr;
  std::exit(env_ok && core_ok && sgemm_ok && blas.choice.source == expected_source ? 0 : 1);
}

// The running CPU cut down to one tier (a kernel the CPU cannot run would not be taken).
CpuFeatures Tier(const char* core) {
  CpuFeatures f = DetectCpuFeatures();
  if (std::strcmp(core, "SkylakeX") == 0) return f;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.os_zmm = false;
  if (std::strcmp(core, "Haswell") == 0) return f;
  f.avx2 = f.fma = false;
  return f;  // Sandybridge.
}

TEST(OpenBlasLoadTest, LoadsTheKernelChosenFromTheFeatures) {
  unsetenv("OPENBLAS_CORETYPE");  // In case the test runs with one set.
  const CpuFeatures cpu = DetectCpuFeatures();
  const std::pair<const char*, bool> tiers[] = {{"SkylakeX", cpu.UsableAvx512()},
                                                {"Haswell", cpu.UsableAvx2Fma()},
                                                {"Sandybridge", cpu.UsableAvx()}};
  int tested = 0;
  for (const auto& [core, usable] : tiers) {
    if (!usable) continue;
    ASSERT_STREQ(OpenBlasCoreForFeatures(Tier(core)), core);
    // Whatever OpenBLAS would pick by itself, the loaded core is the one chosen (on an AVX-512
    // machine Haswell and Sandybridge differ from its own pick), and the variable is gone again.
    EXPECT_EXIT(LoadInChild(Tier(core), core, BlasCoreSource::kCpuFeatures, nullptr),
                ::testing::ExitedWithCode(0),
                absl::StrCat("OpenBLAS [0-9.]+, core ", core, " \\(chosen from CPU features"));
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "no usable AVX: " << CpuFeaturesString(cpu);
}

TEST(OpenBlasLoadTest, KeepsTheUsersCoreType) {
  if (!DetectCpuFeatures().UsableAvx()) GTEST_SKIP() << "Sandybridge needs AVX";
  EXPECT_EXIT(
      {
        setenv("OPENBLAS_CORETYPE", "Sandybridge", 1);
        LoadInChild(Tier("SkylakeX"), "Sandybridge", BlasCoreSource::kUser, "Sandybridge");
      },
      ::testing::ExitedWithCode(0),
      "core Sandybridge \\(OPENBLAS_CORETYPE=Sandybridge set by the user\\)");
}

TEST(OpenBlasLoadTest, LeavesCpusWithoutAvxToOpenBlas) {
  unsetenv("OPENBLAS_CORETYPE");
  EXPECT_EXIT(LoadInChild(CpuFeatures{}, "", BlasCoreSource::kOpenBlas, nullptr),
              ::testing::ExitedWithCode(0), "core [A-Za-z0-9]+ \\(OpenBLAS's own choice");
}

}  // namespace
}  // namespace mt
