// The main() of every single-process program (the tools, the single-process benchmarks, the test
// fixtures' generators): one start-up and one exit convention for all of them; MPI programs have
// comm/mpi_main.h, which prints errors the same way.
#ifndef MT_CORE_TOOL_MAIN_H_
#define MT_CORE_TOOL_MAIN_H_

#include <functional>

#include "absl/status/status.h"

namespace mt {

// Sets `usage` as the flags' usage message and parses the flags; a positional argument is refused
// ("NAME: error: unexpected argument 'X' (flags are --name=value)", exit 1). Then run(): on an
// error "NAME: error: MESSAGE" (one line) on stderr and exit 1; exit 1 too if stdout cannot be
// flushed (a full disk under a redirect); else 0. (gflags itself exits 1 on an unknown flag.)
int ToolMain(const char* name, const char* usage, int argc, char** argv,
             const std::function<absl::Status()>& run);

}  // namespace mt

#endif  // MT_CORE_TOOL_MAIN_H_
