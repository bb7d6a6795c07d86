#include "core/tool_main.h"

#include <cstdio>
#include <string>

#include "gflags/gflags.h"

namespace mt {

int ToolMain(const char* name, const char* usage, int argc, char** argv,
             const std::function<absl::Status()>& run) {
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/true);
  if (argc > 1) {
    std::fprintf(stderr, "%s: unexpected argument '%s' (flags are --name=value)\n", name, argv[1]);
    return 2;
  }
  const absl::Status status = run();
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, std::string(status.message()).c_str());
    return 1;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace mt
