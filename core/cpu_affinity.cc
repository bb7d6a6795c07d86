#include "core/cpu_affinity.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace mt {

std::vector<int> CurrentThreadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

std::vector<int> SpareCpus(const std::vector<int>& allowed, int64_t busy_threads) {
  const int64_t n = static_cast<int64_t>(allowed.size());
  if (busy_threads < 0 || busy_threads >= n) return {};
  return std::vector<int>(allowed.begin() + busy_threads, allowed.end());
}

absl::Status PinCurrentThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return absl::InvalidArgumentError("PinCurrentThread: no CPUs given");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(
          absl::StrCat("PinCurrentThread: CPU ", c, " is outside [0, ", CPU_SETSIZE, ")"));
    }
    CPU_SET(c, &set);
  }
  const int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (err != 0) {
    return absl::InternalError(
        absl::StrCat("PinCurrentThread: CPUs ", DescribeCpus(cpus), ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

std::string DescribeCpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace mt
