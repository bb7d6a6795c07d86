// Which CPUs threads run on (Linux): the CPUs this process may use, those its training threads
// leave free, and pinning a thread to a set (threads it creates afterwards start with its set).
// The background checkpoint writer (train/async_save.h) runs on the spare CPUs, so that hashing
// and writing do not take turns with the training threads on their cores.
#ifndef MT_CORE_CPU_AFFINITY_H_
#define MT_CORE_CPU_AFFINITY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mt {

// The CPUs the calling thread may run on (sched_getaffinity), ascending; empty if unknown.
std::vector<int> CurrentThreadCpus();

// The CPUs of `allowed` (ascending) that `busy_threads` training threads leave free: the last
// allowed.size() - busy_threads of them, or none when the training threads need every CPU. A pure
// rule: the training threads are not pinned, and the scheduler keeps them off CPUs it has to
// share with a pinned writer while other CPUs are free.
std::vector<int> SpareCpus(const std::vector<int>& allowed, int64_t busy_threads);

// Restricts the calling thread to `cpus` (non-empty). InvalidArgument for an empty set or a CPU
// outside [0, CPU_SETSIZE); the system's error (e.g. a CPU outside the cgroup) as Internal.
absl::Status PinCurrentThread(const std::vector<int>& cpus);

// "1", "0-3", "0,2,5-7"; "none" for an empty set.
std::string DescribeCpus(const std::vector<int>& cpus);

}  // namespace mt

#endif  // MT_CORE_CPU_AFFINITY_H_
