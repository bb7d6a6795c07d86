#include "core/subprocess.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

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

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv, const std::string& cwd,
                                       Stderr stderr_to) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty argv");
  const std::string program = FindOnPath(argv[0]);
  if (program.empty()) return absl::NotFoundError(absl::StrCat(argv[0], " not found on PATH"));
  // Everything the child needs is made before fork(): it only calls async-signal-safe functions.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("RunCommand: pipe: ", std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("RunCommand: fork: ", std::strerror(error)));
  }
  if (pid == 0) {
    if (dup2(out[1], STDOUT_FILENO) < 0) _exit(126);  // dup2's copy does not close on exec.
    if (stderr_to == Stderr::kDiscard) {
      const int null = open("/dev/null", O_WRONLY);
      if (null < 0 || dup2(null, STDERR_FILENO) < 0) _exit(126);
    }
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    execv(program.c_str(), args.data());
    _exit(127);
  }
  close(out[1]);
  std::string output;
  char buf[4096];
  absl::Status read_error;
  for (;;) {
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n > 0) {
      output.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      read_error = absl::InternalError(
          absl::StrCat("RunCommand: reading ", argv[0], "'s output: ", std::strerror(errno)));
      break;
    }
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("RunCommand: waitpid: ", std::strerror(errno)));
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        argv[0], WIFEXITED(status) ? absl::StrCat(" exited with status ", WEXITSTATUS(status))
                                   : absl::StrCat(" was killed by signal ", WTERMSIG(status))));
  }
  if (!read_error.ok()) return read_error;
  return output;
}

}  // namespace mt
