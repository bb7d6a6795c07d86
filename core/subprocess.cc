#include "core/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
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
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("RunCommand: pipe: ", std::strerror(errno)));
  }
  // posix_spawn (glibc: clone with CLONE_VM | CLONE_VFORK) instead of fork: a fork copies the
  // caller's page tables and write-protects all its memory, which for a process holding gigabytes
  // (a benchmark timing `dd` beside a loaded model, an experiment driver) costs time inside the
  // child's measured run and a page fault on every later write.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int error = posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  if (error == 0 && stderr_to == Stderr::kDiscard) {
    error = posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  if (error == 0 && !cwd.empty()) {
    error = posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  }
  pid_t pid = -1;
  if (error == 0) {
    error = posix_spawn(&pid, program.c_str(), &actions, nullptr, args.data(), environ);
  }
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("RunCommand: cannot run ", argv[0],
                                            cwd.empty() ? "" : absl::StrCat(" in ", cwd), ": ",
                                            std::strerror(error)));
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
