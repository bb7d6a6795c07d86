// Where a training step's wall time goes, by op class, measured from outside the ops: a sampling
// profiler. Every `interval` of wall-clock time a timer signal interrupts the thread that runs the
// step (a rank's main thread: it issues every op, takes part in OpenBLAS's and the thread pool's
// work and waits for their other threads) and records its call stack. After the run each stack is
// attributed to one op class (ClassifyStack), so a class's share of the samples is its share of
// the step's wall time, with a standard error of about sqrt(p (1 - p) / samples). The ops' own
// code is untouched; what it cannot see: work on other threads that the main thread does not wait
// for (none in a CPU step), and time a GPU spends asynchronously (on a GPU it measures the host).
//
// Linux/x86-64 only; symbols come from the executable's own symbol table (/proc/self/exe, which
// Bazel does not strip of it) and from dladdr for shared libraries.
#ifndef MT_JOBS_BENCH_STEP_PROFILE_H_
#define MT_JOBS_BENCH_STEP_PROFILE_H_

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mt {
namespace jobs {

enum class OpClass {
  kGemm,
  kAttention,
  kElementwise,
  kLayerNorm,
  kLoss,
  kOptimizer,
  kCommunication,
  kOther,
};
inline constexpr int kNumOpClasses = 8;

// "GEMM", "attention", "element-wise", "LayerNorm", "loss", "optimizer", "communication", "other".
const char* OpClassName(OpClass c);

// One frame of a sampled stack: the demangled function ("" when unknown) and its object file.
struct StackFrame {
  std::string function;
  std::string object;
};

// A demangled name without its argument list and template arguments, for matching:
// "void mt::ops::(anonymous namespace)::Norm<float>(mt::X const&)::{lambda(long)#1}::operator()
// (long) const" -> "void mt::ops::(anonymous namespace)::Norm::{lambda#1}::operator const".
std::string StripSignature(const std::string& demangled);

// The class of one stack (innermost frame first); the first rule that applies:
//  1. a frame in mt::comm:: (other than the start-up, mt::comm::MpiMain, below every stack of an
//     MPI program's main thread) or in an MPI/NCCL library -> communication;
//  2. the mt::ops frames, outermost first (the op the model called, then what it calls): the first
//     whose name names a class decides: Gemm, Epilogue -> GEMM; Attention, Softmax, Qkv, Heads ->
//     attention; LayerNorm; CrossEntropy, Sharded -> loss; Adam, L2Norm, SumOfSquares -> optimizer;
//  3. a frame in libopenblas (its kernels have no unwind tables, so a stack may end there) -> GEMM
//     (a sample taken inside a oneDNN GEMM is GEMM before any of these: see Create's
//     `in_jit_gemm`);
//  4. any other mt::ops frame -> element-wise (bias, GeLU, dropout, adds, embedding, conversions);
//  5. a frame in mt::train:: or in ZeroGrads -> optimizer (the update, gradient zeroing);
//  6. otherwise other (model code between ops, allocation, the step loop's own work).
OpClass ClassifyStack(const std::vector<StackFrame>& innermost_first);

// Samples the thread that creates it. At most one sampler exists at a time: it owns SIGPROF's
// handler while it lives. Not thread-safe; Start/Stop from the sampled thread, which must also
// destroy it (the handler runs on an alternate signal stack set for that thread: some of
// oneDNN's JIT GEMMs point the stack pointer into heap memory, where a signal frame written below
// it corrupted the heap).
class StackSampler {
 public:
  // interval_s > 0; at most max_samples stacks are kept (later ones are counted as dropped).
  // `in_jit_gemm` (may be null; ops::OneDnnCallsOnThisThread) is called in the signal handler:
  // nonzero means the thread is in a GEMM whose JIT code has no symbols or unwind tables, so the
  // sample is GEMM and is not unwound. Errors: InvalidArgument for bad arguments,
  // FailedPrecondition when another sampler exists or the timer cannot be created.
  static absl::StatusOr<std::unique_ptr<StackSampler>> Create(double interval_s,
                                                              int64_t max_samples,
                                                              int (*in_jit_gemm)() = nullptr);
  ~StackSampler();
  StackSampler(const StackSampler&) = delete;
  StackSampler& operator=(const StackSampler&) = delete;

  absl::Status Start();  // Arms the timer (samples accumulate over Start/Stop pairs).
  void Stop();

  // Counts of timer intervals: a sample stands for 1 + the expirations that elapsed while the
  // signal was pending (the thread was not running; it was still where the sample found it).
  struct Profile {
    int64_t samples = 0;    // Stacks recorded.
    int64_t dropped = 0;    // Past max_samples.
    int64_t intervals = 0;  // Their weight: about the sampled wall time / interval.
    int64_t by_class[kNumOpClasses] = {};
    // The innermost named functions of the kOther samples, most frequent first (at most 5).
    std::vector<std::pair<std::string, int64_t>> other_top;
  };
  // Symbolizes and classifies the samples so far (after Stop).
  Profile Summarize() const;

  // For the signal handler: records the stack interrupted at `pc`, standing for 1 + `overruns`
  // timer intervals.
  void Record(uintptr_t pc, int overruns);

 private:
  static constexpr int kMaxDepth = 64;
  StackSampler(double interval_s, int64_t max_samples);
  std::vector<uintptr_t> Stack(int64_t i) const;

  double interval_s_;
  int64_t max_samples_;
  std::vector<void*> pcs_;      // [max_samples, kMaxDepth]: the pc, then backtrace()'s frames.
  std::vector<int> depth_;      // [max_samples]
  std::vector<int> weight_;     // [max_samples]
  std::vector<char> jit_gemm_;  // [max_samples]: taken while in_jit_gemm_() was nonzero.
  int (*in_jit_gemm_)() = nullptr;
  std::atomic<int64_t> next_{0};
  // The executable code of libopenblas, [begin, end) pairs: a sample whose pc is there keeps the
  // pc alone (rule 3 of ClassifyStack makes it GEMM). Its hand-written kernels carry no reliable
  // unwind tables, and unwinding from inside them crashed the process (seen with the Prescott
  // kernels).
  std::vector<std::pair<uintptr_t, uintptr_t>> no_unwind_;
  timer_t timer_{};
  bool timer_created_ = false;
  std::vector<char> signal_stack_;  // The handler's stack (sigaltstack), and the one it replaced.
  stack_t previous_signal_stack_{};
  bool signal_stack_set_ = false;
};

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_BENCH_STEP_PROFILE_H_
