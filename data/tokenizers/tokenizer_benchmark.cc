// Encode throughput of the tokenizers, single-threaded and on all cores.
//
//   bazel run -c opt //data/tokenizers:tokenizer_benchmark [-- --threads=N --repeats=R]
//
// Text: the fortunes corpus (English prose, ~2.5 MB, Debian's fortunes packages) and 1 MB of the
// varied generated test text (code, numbers, many scripts, emoji; test_text.h). "cold" runs a
// freshly loaded tokenizer (empty merge cache), "warm" the same text again. The multi-threaded
// runs split the text into documents (fortunes are separated by "%" lines; the generated text is
// cut into 4 KB pieces) and encode them with core/thread_pool.h ParallelFor; every run's ids are
// checked against the single-threaded ones. Prints a Markdown table (MB = 10^6 bytes). The last
// column divides by the process CPU time of the multi-threaded run instead of wall time: on a
// machine shared with other work it still shows whether threads cost extra (locks, contention).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/thread_pool.h"
#include "core/tool_main.h"
#include "data/tokenizers/factory.h"
#include "data/tokenizers/test_text.h"
#include "gflags/gflags.h"

DEFINE_int32(threads, 0, "Threads for the all-cores runs; 0 = all hardware threads.");
DEFINE_int32(repeats, 3, "Timed repetitions of each warm run (the best is reported).");

namespace mt::data {
namespace {

double Seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Corpus {
  const char* name;
  std::vector<std::string> docs;
  size_t bytes = 0;
};

absl::Status Run() {
  absl::StatusOr<std::string> prose = testing::FortunesProse(size_t{1} << 30);
  if (!prose.ok()) return prose.status();
  std::vector<Corpus> corpora(2);
  corpora[0].name = "fortunes prose";
  for (absl::string_view d : absl::StrSplit(*prose, "\n%\n")) corpora[0].docs.emplace_back(d);
  corpora[1].name = "varied generated";
  const std::string varied = testing::GeneratedText(1000000, /*seed=*/1);
  for (size_t i = 0; i < varied.size(); i += 4096)
    corpora[1].docs.push_back(varied.substr(i, 4096));
  for (Corpus& c : corpora) {
    for (const std::string& d : c.docs) c.bytes += d.size();
  }

  const int threads =
      FLAGS_threads > 0 ? FLAGS_threads : static_cast<int>(std::thread::hardware_concurrency());
  ThreadPool pool(threads);
  std::printf(
      "| tokenizer | text | MB | tokens/byte | 1 thread cold MB/s | 1 thread warm MB/s | "
      "%d threads warm MB/s | %d threads MB per CPU-s |\n"
      "|---|---|---|---|---|---|---|---|\n",
      threads, threads);
  for (const std::string& name : TokenizerNames()) {
    for (const Corpus& c : corpora) {
      absl::StatusOr<std::unique_ptr<Tokenizer>> tok = CreateTokenizer(name);  // Fresh cache.
      if (!tok.ok()) return tok.status();
      std::vector<std::vector<int32_t>> serial(c.docs.size());
      auto encode_serial = [&] {
        for (size_t i = 0; i < c.docs.size(); ++i) serial[i] = (*tok)->Encode(c.docs[i]);
      };
      const double cold = Seconds(encode_serial);
      double warm = 1e30, parallel = 1e30, parallel_cpu = 1e30;
      for (int r = 0; r < FLAGS_repeats; ++r) warm = std::min(warm, Seconds(encode_serial));
      std::vector<std::vector<int32_t>> ids(c.docs.size());
      for (int r = 0; r < FLAGS_repeats; ++r) {
        const double cpu0 = CpuSeconds();
        parallel = std::min(parallel, Seconds([&] {
                              ParallelFor(&pool, static_cast<int64_t>(c.docs.size()), 16,
                                          [&](int64_t b, int64_t e) {
                                            for (int64_t i = b; i < e; ++i)
                                              ids[i] = (*tok)->Encode(c.docs[i]);
                                          });
                            }));
        parallel_cpu = std::min(parallel_cpu, CpuSeconds() - cpu0);
      }
      if (ids != serial) {
        return absl::InternalError(absl::StrCat(name, ": multi-threaded ids differ"));
      }
      size_t tokens = 0;
      for (const auto& v : serial) tokens += v.size();
      const double mb = c.bytes / 1e6;
      std::printf("| %s | %s | %.2f | %.3f | %.1f | %.1f | %.1f | %.1f |\n", name.c_str(), c.name,
                  mb, static_cast<double>(tokens) / c.bytes, mb / cold, mb / warm, mb / parallel,
                  mb / parallel_cpu);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace mt::data

int main(int argc, char** argv) {
  return mt::ToolMain("tokenizer_benchmark",
                      "[--threads=N] [--repeats=R]: tokenizer encode throughput", argc, argv,
                      mt::data::Run);
}
