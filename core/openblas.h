// OpenBLAS, loaded once per process with the best kernel the CPU supports.
//
// Why: Debian's libopenblas0 is a DYNAMIC_ARCH build that picks its kernels ("core") from the
// CPU's family/model numbers, and a CPU newer than its table (e.g. family 6 model 207 for 0.3.21)
// falls back to the Prescott (SSE3) kernels: 5x slower f32 GEMMs on an AVX-512 machine. OpenBLAS
// honours OPENBLAS_CORETYPE instead, but reads it only once, in the constructor that runs when
// the library is loaded. So the kernel is chosen here from CPUID feature bits and the OS's XCR0
// (core/cpu_features.h), never from model numbers:
//   AVX-512 F+BW+VL+DQ usable -> SkylakeX, AVX2+FMA -> Haswell, AVX -> Sandybridge, else nothing
//   (OpenBLAS's own choice), and an OPENBLAS_CORETYPE already in the environment (even empty) is
//   the user's and wins: it is never overwritten.
// On CPUs that OpenBLAS does recognise, its own pick for these tiers runs the same f32 GEMM
// kernels (Zen's SGEMM is Haswell's; Cooperlake's and SapphireRapids' are SkylakeX's).
//
// How: libopenblas is not linked; LoadOpenBlas() sets OPENBLAS_CORETYPE, dlopen()s
// libopenblas.so.0, and removes the variable again (so child processes decide for themselves and
// do not mistake it for the user's). The alternatives do not work for every binary:
//  - setenv() in main(), or in any constructor of the executable, is too late: ld.so runs the
//    initialisers of all shared-library dependencies (libopenblas's among them) before the
//    executable's own, whatever the constructor priority; priorities order constructors within
//    one object only, and this project links its libraries statically into each executable.
//  - a constructor in a shared library of ours would have to run before libopenblas's, which
//    ld.so orders only by dependencies and load order, not something a build can pin down.
//  - re-exec'ing the process with the variable set doubles every start-up and leaves the variable
//    behind, indistinguishable from the user's (and in MPI ranks, sanitizers and gtest death
//    tests a second exec is one more thing to go wrong).
// //core:openblas_autoload calls LoadOpenBlas() from a constructor, i.e. before main() and
// before any thread exists (setenv is not thread-safe); //core/ops:gemm depends on it, so every
// binary that multiplies matrices gets it. Without that library, the first call loads it.
//
// The library is a process-wide resource (OpenBLAS's thread count is process-wide too), so this
// is a process-wide singleton by nature. Thread-safe: the first call loads, later ones return it.
#ifndef MT_CORE_OPENBLAS_H_
#define MT_CORE_OPENBLAS_H_

#include <string>

#include "absl/status/status.h"
#include "core/cpu_features.h"

namespace mt {

// Who chose the OpenBLAS core.
enum class BlasCoreSource {
  kCpuFeatures,  // We set OPENBLAS_CORETYPE from the CPU's features.
  kUser,         // OPENBLAS_CORETYPE was in the environment: kept as it was.
  kOpenBlas,     // No tier matched (no usable AVX): OpenBLAS's own detection.
};

struct OpenBlasCoreChoice {
  const char* core = nullptr;  // The OPENBLAS_CORETYPE to set ("SkylakeX", ...); null: none.
  BlasCoreSource source = BlasCoreSource::kOpenBlas;
};

// The OpenBLAS core for these features: "SkylakeX", "Haswell", "Sandybridge", or null when the
// CPU has no usable AVX (pure).
const char* OpenBlasCoreForFeatures(const CpuFeatures& f);

// The choice for these features when the environment's OPENBLAS_CORETYPE is `user_coretype`
// (null: unset). A set variable, even an empty one, is the user's: {null, kUser} (pure).
OpenBlasCoreChoice ChooseOpenBlasCore(const CpuFeatures& f, const char* user_coretype);

// The loaded library. The function pointers are set iff status is OK.
struct OpenBlas {
  absl::Status status;  // FailedPrecondition naming the dlopen/dlsym error when it did not load.
  // Fortran-ABI sgemm (column-major, 32-bit integers), as in the reference BLAS.
  void (*sgemm)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                const float* beta, float* c, const int* ldc) = nullptr;
  void (*set_num_threads)(int num_threads) = nullptr;  // Process-wide.

  CpuFeatures features;  // What the choice was made from.
  OpenBlasCoreChoice choice;
  std::string user_coretype;   // The user's OPENBLAS_CORETYPE (source kUser).
  bool loaded_before = false;  // libopenblas was already in the process: the choice came late.
  std::string version;         // "OpenBLAS 0.3.21" (from openblas_get_config()).
  std::string core;            // openblas_get_corename(): the core in use, e.g. "SkylakeX".
};

// Loads libopenblas.so.0 on the first call, as described above, for the running CPU's features.
const OpenBlas& LoadOpenBlas();

// The same with `features` instead of the detected ones (tests). Only a process's first load
// decides: later calls, with any features, return the library loaded then.
const OpenBlas& LoadOpenBlasFor(const CpuFeatures& features);

// One line for logs and benchmark headers, e.g.
//   "OpenBLAS 0.3.21, core SkylakeX (chosen from CPU features: avx512f avx512bw ...)"
//   "OpenBLAS 0.3.21, core Haswell (OPENBLAS_CORETYPE=Haswell set by the user)"
//   "OpenBLAS not loaded: <why>"
std::string DescribeBlas(const OpenBlas& blas);
std::string DescribeBlas();  // Of LoadOpenBlas().

}  // namespace mt

#endif  // MT_CORE_OPENBLAS_H_
