#include "core/tool_main.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_replace.h"
#include "gflags/gflags.h"

namespace mt {

int ToolMain(const char* name, const char* usage, int argc, char** argv,
             const std::function<absl::Status()>& run) {
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/true);
  if (argc > 1) {
    std::fprintf(stderr, "%s: error: unexpected argument '%s' (flags are --name=value)\n", name,
                 argv[1]);
    return 1;
  }
  const absl::Status status = run();
  if (!status.ok()) {
    const std::string line = absl::StrReplaceAll(status.message(), {{"\n", " "}});
    std::fprintf(stderr, "%s: error: %s\n", name, line.c_str());
    return 1;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace mt
