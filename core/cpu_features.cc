#include "core/cpu_features.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_join.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace mt {
namespace {

#if defined(__x86_64__) || defined(__i386__)
bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

// XCR0 through XGETBV, written out so that no -mxsave is needed to compile it.
uint64_t ReadXcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

}  // namespace

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  f.sse3 = Bit(ecx, 0);
  f.fma = Bit(ecx, 12);
  f.osxsave = Bit(ecx, 27);
  f.avx = Bit(ecx, 28);
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx2 = Bit(ebx, 5);
    f.avx512f = Bit(ebx, 16);
    f.avx512dq = Bit(ebx, 17);
    f.avx512bw = Bit(ebx, 30);
    f.avx512vl = Bit(ebx, 31);
    f.amx_bf16 = Bit(edx, 22);
    f.amx_tile = Bit(edx, 24);
    const uint32_t max_subleaf = eax;
    if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
      f.avx512_bf16 = Bit(eax, 5);
    }
  }
  if (f.osxsave) {
    const uint64_t xcr0 = ReadXcr0();
    f.os_ymm = (xcr0 & 0x6) == 0x6;
    f.os_zmm = (xcr0 & 0xE0) == 0xE0;
    f.os_amx = (xcr0 & 0x60000) == 0x60000;
  }
#endif
  return f;
}

std::string CpuFeaturesString(const CpuFeatures& f) {
  std::vector<std::string> names;
  auto add = [&](const char* name, bool present, bool enabled) {
    if (present) names.push_back(enabled ? name : std::string(name) + " (not enabled by the OS)");
  };
  const bool ymm = f.osxsave && f.os_ymm, zmm = ymm && f.os_zmm;
  add("amx_bf16", f.amx_tile && f.amx_bf16, zmm && f.os_amx);
  add("avx512_bf16", f.avx512_bf16, zmm);
  add("avx512f", f.avx512f, zmm);
  add("avx512bw", f.avx512bw, zmm);
  add("avx512vl", f.avx512vl, zmm);
  add("avx512dq", f.avx512dq, zmm);
  add("avx2", f.avx2, ymm);
  add("fma", f.fma, ymm);
  add("avx", f.avx, ymm);
  add("sse3", f.sse3, true);
  return names.empty() ? "none" : absl::StrJoin(names, " ");
}

}  // namespace mt
