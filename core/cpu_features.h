// The x86 vector-instruction features a process can use: what CPUID says the CPU implements,
// and what the operating system has enabled (XCR0, read with XGETBV): a CPU's AVX-512 is usable
// only when the OS saves and restores the opmask and ZMM registers on a context switch.
//
// //core:openblas picks OpenBLAS's kernel from these bits (core/openblas.h). Detection is cheap
// (a few CPUID instructions) and thread-safe; on other architectures every bit is false.
#ifndef MT_CORE_CPU_FEATURES_H_
#define MT_CORE_CPU_FEATURES_H_

#include <string>

namespace mt {

struct CpuFeatures {
  // CPUID leaf 1, ECX.
  bool sse3 = false;
  bool fma = false;
  bool osxsave = false;  // The OS has enabled XSAVE, so XGETBV can be executed.
  bool avx = false;
  // CPUID leaf 7, sub-leaf 0, EBX.
  bool avx2 = false;
  bool avx512f = false;
  bool avx512dq = false;
  bool avx512bw = false;
  bool avx512vl = false;
  // CPUID leaf 7, sub-leaf 1, EAX bit 5: AVX512_BF16 (VDPBF16PS and the bf16 conversions).
  bool avx512_bf16 = false;
  // CPUID leaf 7, sub-leaf 0, EDX: AMX tiles (bit 24) with bf16 tile multiplies (bit 22).
  bool amx_tile = false;
  bool amx_bf16 = false;
  // XCR0 (only read when osxsave): the register state the OS saves and restores.
  bool os_ymm = false;  // Bits 1 and 2: XMM and the upper halves of YMM.
  bool os_zmm = false;  // Bits 5, 6 and 7: opmask, the upper halves of ZMM0-15, ZMM16-31.
  bool os_amx = false;  // Bits 17 and 18: XTILECFG and XTILEDATA (a process still asks Linux
                        // for the tile data through arch_prctl, which oneDNN does itself).

  // Usable instruction sets: the CPU implements them and the OS has enabled their registers.
  bool UsableAvx() const { return avx && osxsave && os_ymm; }
  bool UsableAvx2Fma() const { return UsableAvx() && avx2 && fma; }
  // F, BW, VL and DQ: the subset OpenBLAS's SkylakeX kernels are built for.
  bool UsableAvx512() const {
    return UsableAvx2Fma() && os_zmm && avx512f && avx512bw && avx512vl && avx512dq;
  }
  // bf16 multiplies in hardware: AVX512_BF16 (Cooper Lake, Zen 4, Sapphire Rapids) or AMX-BF16
  // (Sapphire Rapids and later).
  bool UsableAvx512Bf16() const { return UsableAvx512() && avx512_bf16; }
  bool UsableAmxBf16() const { return UsableAvx512() && amx_tile && amx_bf16 && os_amx; }
};

// The running CPU's features.
CpuFeatures DetectCpuFeatures();

// The usable instruction sets, widest first, e.g. "amx_bf16 avx512_bf16 avx512f avx512bw avx512vl
// avx512dq avx2 fma avx sse3"; a set the CPU has but the OS has not enabled is marked, e.g.
// "avx512f (not enabled by the OS)"; "none" when nothing is set.
std::string CpuFeaturesString(const CpuFeatures& f);

}  // namespace mt

#endif  // MT_CORE_CPU_FEATURES_H_
