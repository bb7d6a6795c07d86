#include "core/subprocess.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mt {

std::string FindOnPath(absl::string_view program) {
  if (program.find('/') != absl::string_view::npos) {
    const std::string p(program);
    return access(p.c_str(), X_OK) == 0 ? p : "";
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       const std::string& cwd) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty argv");
  const std::string program = FindOnPath(argv[0]);
  if (program.empty()) return absl::NotFoundError(absl::StrCat(argv[0], " not found on PATH"));
  int out[2];
  if (pipe(out) != 0) return absl::InternalError("RunCommand: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("RunCommand: fork failed");
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(program.c_str(), args.data());
    _exit(127);
  }
  close(out[1]);
  std::string output;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) output.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        argv[0], WIFEXITED(status) ? absl::StrCat(" exited with status ", WEXITSTATUS(status))
                                   : absl::StrCat(" was killed by signal ", WTERMSIG(status))));
  }
  return output;
}

}  // namespace mt
