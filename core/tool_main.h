// The main() of a single-process command-line tool (//data:tokenize, :preprocess,
// :make_default_data, //core/ops:attention_bench, :ops_cuda_bench): one exit-code convention for
// all of them.
#ifndef MT_CORE_TOOL_MAIN_H_
#define MT_CORE_TOOL_MAIN_H_

#include <functional>

#include "absl/status/status.h"

namespace mt {

// Sets `usage` as the flags' usage message and parses the flags; a positional argument is refused
// ("NAME: unexpected argument 'X' (flags are --name=value)", exit 2). Then run(): on an error
// "NAME: MESSAGE" on stderr and exit 1; exit 1 too if stdout cannot be flushed (a full disk under
// a redirect); else 0.
int ToolMain(const char* name, const char* usage, int argc, char** argv,
             const std::function<absl::Status()>& run);

}  // namespace mt

#endif  // MT_CORE_TOOL_MAIN_H_
