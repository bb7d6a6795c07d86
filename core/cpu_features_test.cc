#include "core/cpu_features.h"

#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_split.h"
#include "core/cpu_features_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

// The "flags" of the first processor in /proc/cpuinfo: Linux lists a vector extension only when
// the CPU has it and the kernel enabled its registers in XCR0, i.e. when it is usable.
std::set<std::string> LinuxCpuFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    std::set<std::string> flags;
    for (absl::string_view f : absl::StrSplit(line.substr(colon + 1), ' ', absl::SkipEmpty())) {
      flags.emplace(f);
    }
    return flags;
  }
  return {};
}

TEST(CpuFeaturesTest, AgreesWithTheKernelsCpuFlags) {
  const std::set<std::string> flags = LinuxCpuFlags();
  if (flags.empty()) GTEST_SKIP() << "no x86 flags in /proc/cpuinfo";
  const CpuFeatures f = DetectCpuFeatures();
  auto has = [&](const char* name) { return flags.count(name) > 0; };
  const bool ymm = f.UsableAvx(), zmm = ymm && f.os_zmm;
  EXPECT_EQ(has("pni"), f.sse3);  // Linux's name for SSE3.
  EXPECT_EQ(has("avx"), ymm);
  EXPECT_EQ(has("avx2"), ymm && f.avx2);
  EXPECT_EQ(has("fma"), ymm && f.fma);
  EXPECT_EQ(has("avx512f"), zmm && f.avx512f);
  EXPECT_EQ(has("avx512bw"), zmm && f.avx512bw);
  EXPECT_EQ(has("avx512vl"), zmm && f.avx512vl);
  EXPECT_EQ(has("avx512dq"), zmm && f.avx512dq);
  EXPECT_EQ(has("avx512_bf16"), zmm && f.avx512_bf16);
  EXPECT_EQ(has("amx_bf16"), f.amx_bf16 && f.os_amx);
  EXPECT_EQ(has("amx_tile"), f.amx_tile && f.os_amx);
  EXPECT_EQ(f.UsableAvx512(), has("avx512f") && has("avx512bw") && has("avx512vl") &&
                                  has("avx512dq") && has("avx2") && has("fma"));
}

using testing::Avx512CpuFeatures;

TEST(CpuFeaturesTest, UsableSetsNeedTheOsToEnableTheRegisters) {
  CpuFeatures f = Avx512CpuFeatures();
  EXPECT_TRUE(f.UsableAvx512());
  f.os_zmm = false;
  EXPECT_FALSE(f.UsableAvx512());
  EXPECT_TRUE(f.UsableAvx2Fma());
  f.os_ymm = false;
  EXPECT_FALSE(f.UsableAvx());
  EXPECT_FALSE(f.UsableAvx2Fma());
  f = Avx512CpuFeatures();
  f.avx512_bf16 = f.amx_tile = f.amx_bf16 = true;
  EXPECT_TRUE(f.UsableAvx512Bf16());
  EXPECT_FALSE(f.UsableAmxBf16());  // The OS has not enabled the tile registers.
  f.os_amx = true;
  EXPECT_TRUE(f.UsableAmxBf16());
  f.os_zmm = false;
  EXPECT_FALSE(f.UsableAvx512Bf16());
  EXPECT_FALSE(f.UsableAmxBf16());
  f = Avx512CpuFeatures();
  f.osxsave = false;  // XCR0 cannot even be read.
  EXPECT_FALSE(f.UsableAvx());
  EXPECT_FALSE(f.UsableAvx512());
}

TEST(CpuFeaturesTest, StringListsUsableSetsAndMarksDisabledOnes) {
  EXPECT_EQ(CpuFeaturesString(CpuFeatures{}), "none");
  EXPECT_EQ(CpuFeaturesString(Avx512CpuFeatures()),
            "avx512f avx512bw avx512vl avx512dq avx2 fma avx sse3");
  CpuFeatures f = Avx512CpuFeatures();
  f.os_zmm = false;
  f.avx512bw = f.avx512vl = f.avx512dq = false;
  EXPECT_EQ(CpuFeaturesString(f), "avx512f (not enabled by the OS) avx2 fma avx sse3");
  f = Avx512CpuFeatures();
  f.avx512_bf16 = f.amx_tile = f.amx_bf16 = true;
  EXPECT_EQ(CpuFeaturesString(f),
            "amx_bf16 (not enabled by the OS) avx512_bf16 avx512f avx512bw avx512vl avx512dq avx2 "
            "fma avx sse3");
}

}  // namespace
}  // namespace mt
