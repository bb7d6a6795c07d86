// main() of a fuzz target in the default build (tools/defs.bzl mt_fuzz_test): the target's
// LLVMFuzzerTestOneInput runs on every seed file named on the command line, then on inputs
// mutated deterministically from them (mutator.h), until MT_FUZZ_INPUTS inputs (default 3000) or
// MT_FUZZ_SECONDS seconds (default 3) have run, whichever comes first. A target reports a bug by
// crashing (CHECK, abort, a sanitizer); the input that crashed is written to
// $TEST_UNDECLARED_OUTPUTS_DIR/crash-input (else ./crash-input) and its path printed, so that it
// can become a seed. Prints "fuzz: S seeds, N mutated inputs in T s" at the end.
//
//   bazel-bin/PKG/TARGET FILE...       as the test runs it (args: the seed files)
//   MT_FUZZ_INPUTS=0 bazel-bin/PKG/TARGET crash-input   replays one input
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "tools/fuzz/mutator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being run, for the crash handler (async-signal-safe writes only).
const std::string* current_input = nullptr;
char crash_path[4096];

void OnCrash(int sig) {
  if (current_input != nullptr) {
    const int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      (void)!write(fd, current_input->data(), current_input->size());
      close(fd);
      const char msg[] = "\nfuzz: the input that crashed is in ";
      (void)!write(2, msg, sizeof(msg) - 1);
      (void)!write(2, crash_path, strlen(crash_path));
      (void)!write(2, "\n", 1);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  int64_t out = 0;
  return v != nullptr && absl::SimpleAtoi(v, &out) && out >= 0 ? out : fallback;
}

void Run(const std::string& input) {
  current_input = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  current_input = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const char* out_dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  snprintf(crash_path, sizeof(crash_path), "%s/crash-input", out_dir != nullptr ? out_dir : ".");
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnCrash);

  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      fprintf(stderr, "fuzz: cannot read seed %s\n", argv[i]);
      return 1;
    }
    std::stringstream bytes;
    bytes << in.rdbuf();
    seeds.push_back(bytes.str());
  }
  if (seeds.empty()) seeds.emplace_back();
  for (const std::string& seed : seeds) Run(seed);

  const int64_t max_inputs = EnvInt("MT_FUZZ_INPUTS", 3000);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(EnvInt("MT_FUZZ_SECONDS", 3));
  size_t max_size = 256;
  for (const std::string& seed : seeds) max_size = std::max(max_size, 2 * seed.size());
  mt::fuzz::Rng rng(0x6d742d66757a7aull);  // "mt-fuzz"
  const auto start = std::chrono::steady_clock::now();
  int64_t n = 0;
  for (; n < max_inputs && std::chrono::steady_clock::now() < deadline; ++n) {
    Run(mt::fuzz::Mutate(seeds, max_size, &rng));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  printf("fuzz: %zu seeds, %lld mutated inputs in %.2f s\n", seeds.size(),
         static_cast<long long>(n), seconds);
  return 0;
}
