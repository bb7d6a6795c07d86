#include "jobs/bench/step_profile.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mt {
namespace jobs {
namespace {

// ---- Classification (pure). ----

struct Keyword {
  const char* word;
  OpClass op_class;
};
// Matched against the stripped names of mt::ops frames; see ClassifyStack's rule 2.
constexpr Keyword kOpKeywords[] = {
    {"Gemm", OpClass::kGemm},           {"Epilogue", OpClass::kGemm},
    {"Attention", OpClass::kAttention}, {"Softmax", OpClass::kAttention},
    {"Qkv", OpClass::kAttention},       {"Heads", OpClass::kAttention},
    {"LayerNorm", OpClass::kLayerNorm}, {"CrossEntropy", OpClass::kLoss},
    {"Sharded", OpClass::kLoss},        {"Adam", OpClass::kOptimizer},
    {"L2Norm", OpClass::kOptimizer},    {"SumOfSquares", OpClass::kOptimizer},
};

// Shared objects of MPI (Open MPI's libraries and its plug-ins) and NCCL.
constexpr const char* kCommObjects[] = {"libmpi",      "openmpi", "libopen-pal",
                                        "libopen-rte", "libpmix", "libucp",
                                        "libucs",      "libuct",  "libnccl"};

bool IsOpsFrame(const std::string& name) { return absl::StrContains(name, "mt::ops::"); }

bool IsCommFrame(const StackFrame& f, const std::string& name) {
  // MpiMain (and the lambdas it calls) holds the whole run: not communication.
  if (absl::StartsWith(name, "mt::comm::MpiMain")) return false;
  if (absl::StrContains(name, "mt::comm::")) return true;
  for (const char* object : kCommObjects) {
    if (absl::StrContains(f.object, object)) return true;
  }
  return false;
}

// ---- Symbols of the executable (its .symtab keeps the local functions dladdr cannot see). ----

struct Symbol {
  uintptr_t start, end;  // Link-time addresses.
  std::string name;
};

std::vector<Symbol> ReadFunctionSymbols(const char* path) {
  std::vector<Symbol> symbols;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return symbols;
  struct stat st;
  void* map =
      fstat(fd, &st) == 0 ? mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return symbols;
  const char* base = static_cast<const char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  if (st.st_size >= static_cast<off_t>(sizeof(Elf64_Ehdr)) &&
      std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64) {
    const auto* sections = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; ++i) {
      const Elf64_Shdr& s = sections[i];
      if (s.sh_type != SHT_SYMTAB && s.sh_type != SHT_DYNSYM) continue;
      const char* names = base + sections[s.sh_link].sh_offset;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + s.sh_offset);
      for (size_t j = 0; j < s.sh_size / sizeof(Elf64_Sym); ++j) {
        if (ELF64_ST_TYPE(syms[j].st_info) != STT_FUNC || syms[j].st_size == 0) continue;
        symbols.push_back(
            {syms[j].st_value, syms[j].st_value + syms[j].st_size, names + syms[j].st_name});
      }
    }
  }
  munmap(map, st.st_size);
  std::sort(symbols.begin(), symbols.end(),
            [](const Symbol& a, const Symbol& b) { return a.start < b.start; });
  return symbols;
}

std::string Demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = status == 0 && out != nullptr ? out : name;
  std::free(out);
  return result;
}

// The executable's load bias and address ranges (the first object dl_iterate_phdr reports).
struct MainProgram {
  uintptr_t bias = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  bool found = false;
};

int FindMainProgram(dl_phdr_info* info, size_t, void* data) {
  auto* main = static_cast<MainProgram*>(data);
  main->bias = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type == PT_LOAD)
      main->ranges.push_back(
          {info->dlpi_addr + p.p_vaddr, info->dlpi_addr + p.p_vaddr + p.p_memsz});
  }
  main->found = true;
  return 1;  // The first one only.
}

// Frame names for program counters, memoised.
class Symbolizer {
 public:
  Symbolizer() : symbols_(ReadFunctionSymbols("/proc/self/exe")) {
    dl_iterate_phdr(&FindMainProgram, &main_);
  }

  const StackFrame& Resolve(uintptr_t pc) {
    auto it = cache_.find(pc);
    if (it != cache_.end()) return it->second;
    StackFrame f;
    if (InMain(pc)) {
      f.object = "(executable)";
      const uintptr_t link_pc = pc - main_.bias;
      auto s = std::upper_bound(symbols_.begin(), symbols_.end(), link_pc,
                                [](uintptr_t v, const Symbol& sym) { return v < sym.start; });
      if (s != symbols_.begin() && link_pc < std::prev(s)->end) {
        f.function = Demangle(std::prev(s)->name.c_str());
      }
    } else if (Dl_info info; dladdr(reinterpret_cast<void*>(pc), &info) != 0) {
      f.object = info.dli_fname != nullptr ? info.dli_fname : "";
      if (info.dli_sname != nullptr) f.function = Demangle(info.dli_sname);
    }
    return cache_.emplace(pc, std::move(f)).first->second;
  }

 private:
  bool InMain(uintptr_t pc) const {
    for (const auto& [begin, end] : main_.ranges) {
      if (pc >= begin && pc < end) return true;
    }
    return false;
  }

  std::vector<Symbol> symbols_;
  MainProgram main_;
  std::map<uintptr_t, StackFrame> cache_;
};

// The executable segments of the loaded objects whose path contains `name`.
std::vector<std::pair<uintptr_t, uintptr_t>> ExecutableRanges(const char* name) {
  struct Search {
    const char* name;
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  } search{name, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* search = static_cast<Search*>(data);
        if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, search->name) == nullptr) {
          return 0;
        }
        for (int h = 0; h < info->dlpi_phnum; ++h) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[h];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
          const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
          search->ranges.emplace_back(begin, begin + ph.p_memsz);
        }
        return 0;
      },
      &search);
  return search.ranges;
}

// ---- The signal handler. ----

std::atomic<StackSampler*> g_sampler{nullptr};
struct sigaction g_previous_action;

void OnSignal(int, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  uintptr_t pc = 0;
#if defined(__x86_64__)
  pc = static_cast<uintptr_t>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
#endif
  if (StackSampler* s = g_sampler.load(std::memory_order_acquire); s != nullptr)
    s->Record(pc, info->si_overrun);
  errno = saved_errno;
}

}  // namespace

const char* OpClassName(OpClass c) {
  static constexpr const char* kNames[kNumOpClasses] = {
      "GEMM", "attention", "element-wise",  "LayerNorm",
      "loss", "optimizer", "communication", "other"};
  return kNames[static_cast<int>(c)];
}

std::string StripSignature(const std::string& demangled) {
  static constexpr char kAnonymous[] = "(anonymous namespace)";
  std::string out;
  int parens = 0, angles = 0;
  for (size_t i = 0; i < demangled.size(); ++i) {
    const char ch = demangled[i];
    if (parens == 0 && angles == 0 &&
        demangled.compare(i, sizeof(kAnonymous) - 1, kAnonymous) == 0) {
      out += kAnonymous;
      i += sizeof(kAnonymous) - 2;
      continue;
    }
    if (ch == '(') ++parens;
    if (ch == '<' && parens == 0) ++angles;
    if (parens == 0 && angles == 0) out += ch;
    if (ch == ')' && parens > 0) --parens;
    if (ch == '>' && parens == 0 && angles > 0) --angles;
  }
  return out;
}

OpClass ClassifyStack(const std::vector<StackFrame>& innermost_first) {
  std::vector<std::string> names;
  names.reserve(innermost_first.size());
  for (const StackFrame& f : innermost_first) names.push_back(StripSignature(f.function));
  const int n = static_cast<int>(names.size());
  for (int i = 0; i < n; ++i) {
    if (IsCommFrame(innermost_first[i], names[i])) return OpClass::kCommunication;
  }
  bool ops_frame = false;
  for (int i = n - 1; i >= 0; --i) {  // Outermost first.
    if (!IsOpsFrame(names[i])) continue;
    ops_frame = true;
    for (const Keyword& k : kOpKeywords) {
      if (absl::StrContains(names[i], k.word)) return k.op_class;
    }
  }
  for (const StackFrame& f : innermost_first) {
    if (absl::StrContains(f.object, "libopenblas")) return OpClass::kGemm;
  }
  if (ops_frame) return OpClass::kElementwise;
  for (const std::string& name : names) {
    if (absl::StrContains(name, "mt::train::") || absl::StrContains(name, "ZeroGrads")) {
      return OpClass::kOptimizer;
    }
  }
  return OpClass::kOther;
}

StackSampler::StackSampler(double interval_s, int64_t max_samples)
    : interval_s_(interval_s),
      max_samples_(max_samples),
      pcs_(max_samples * kMaxDepth),
      depth_(max_samples, 0),
      weight_(max_samples, 0),
      jit_gemm_(max_samples, 0) {}

absl::StatusOr<std::unique_ptr<StackSampler>> StackSampler::Create(double interval_s,
                                                                   int64_t max_samples,
                                                                   int (*in_jit_gemm)()) {
  if (!(interval_s > 0) || max_samples < 1) {
    return absl::InvalidArgumentError(absl::StrCat("StackSampler: interval ", interval_s,
                                                   " s and max_samples ", max_samples,
                                                   " must be positive"));
  }
  std::unique_ptr<StackSampler> s(new StackSampler(interval_s, max_samples));
  StackSampler* expected = nullptr;
  if (!g_sampler.compare_exchange_strong(expected, s.get())) {
    return absl::FailedPreconditionError("StackSampler: another sampler exists");
  }
  s->no_unwind_ = ExecutableRanges("libopenblas");
  s->in_jit_gemm_ = in_jit_gemm;
  // The first backtrace() loads the unwinder (dlopen, malloc): not in a signal handler.
  void* warm_up[4];
  backtrace(warm_up, 4);
  // The handler's own stack: the sampled thread may be running with its stack pointer anywhere
  // (oneDNN's AVX2 f32 GEMM kernels point it into heap memory), and the kernel writes the signal
  // frame (with the AVX-512 and AMX registers, several KiB) below it.
  s->signal_stack_.resize(size_t{256} << 10);
  stack_t alt = {};
  alt.ss_sp = s->signal_stack_.data();
  alt.ss_size = s->signal_stack_.size();
  if (sigaltstack(&alt, &s->previous_signal_stack_) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("StackSampler: sigaltstack failed: ", std::strerror(errno)));
  }
  s->signal_stack_set_ = true;
  struct sigaction action = {};
  action.sa_sigaction = &OnSignal;
  action.sa_flags = SA_RESTART | SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGPROF, &action, &g_previous_action);
  // Wall-clock expirations, delivered to this thread only.
  struct sigevent event = {};
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = SIGPROF;
  event._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
  if (timer_create(CLOCK_MONOTONIC, &event, &s->timer_) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("StackSampler: timer_create failed: ", std::strerror(errno)));
  }
  s->timer_created_ = true;
  return s;
}

StackSampler::~StackSampler() {
  if (timer_created_) {
    Stop();
    timer_delete(timer_);
  }
  StackSampler* self = this;
  if (g_sampler.compare_exchange_strong(self, nullptr)) {
    sigaction(SIGPROF, &g_previous_action, nullptr);
  }
  if (signal_stack_set_) sigaltstack(&previous_signal_stack_, nullptr);
}

absl::Status StackSampler::Start() {
  const int64_t ns = static_cast<int64_t>(interval_s_ * 1e9);
  itimerspec spec = {};
  spec.it_interval.tv_sec = ns / 1000000000;
  spec.it_interval.tv_nsec = ns % 1000000000;
  spec.it_value = spec.it_interval;
  if (timer_settime(timer_, 0, &spec, nullptr) != 0) {
    return absl::InternalError(
        absl::StrCat("StackSampler: timer_settime failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void StackSampler::Stop() {
  itimerspec off = {};
  timer_settime(timer_, 0, &off, nullptr);
}

void StackSampler::Record(uintptr_t pc, int overruns) {
  const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
  if (i >= max_samples_) return;
  weight_[i] = 1 + std::max(0, overruns);
  void** out = &pcs_[i * kMaxDepth];
  out[0] = reinterpret_cast<void*>(pc);
  if (in_jit_gemm_ != nullptr && in_jit_gemm_() != 0) {
    jit_gemm_[i] = 1;
    depth_[i] = 1;
    return;
  }
  for (const auto& [begin, end] : no_unwind_) {
    if (pc >= begin && pc < end) {
      depth_[i] = 1;
      return;
    }
  }
  depth_[i] = 1 + backtrace(out + 1, kMaxDepth - 1);
}

// The sampled stack: the interrupted pc, then the return addresses backtrace() found beyond it
// (past the handler's own frames and the kernel's signal trampoline; none if it could not unwind
// through the signal frame).
std::vector<uintptr_t> StackSampler::Stack(int64_t i) const {
  const void* const* pcs = &pcs_[i * kMaxDepth];
  std::vector<uintptr_t> stack = {reinterpret_cast<uintptr_t>(pcs[0])};
  for (int d = 1; d < depth_[i]; ++d) {
    if (pcs[d] != pcs[0]) continue;
    for (int e = d + 1; e < depth_[i]; ++e) stack.push_back(reinterpret_cast<uintptr_t>(pcs[e]));
    break;
  }
  return stack;
}

StackSampler::Profile StackSampler::Summarize() const {
  Profile p;
  const int64_t recorded = std::min(next_.load(), max_samples_);
  p.samples = recorded;
  p.dropped = next_.load() - recorded;
  Symbolizer symbolizer;
  std::map<std::string, int64_t> other;
  for (int64_t i = 0; i < recorded; ++i) {
    p.intervals += weight_[i];
    if (jit_gemm_[i]) {
      p.by_class[static_cast<int>(OpClass::kGemm)] += weight_[i];
      continue;
    }
    std::vector<StackFrame> frames;
    const std::vector<uintptr_t> stack = Stack(i);
    for (size_t d = 0; d < stack.size(); ++d) {
      // Return addresses point after the call; the interrupted pc is exact.
      frames.push_back(symbolizer.Resolve(d == 0 ? stack[d] : stack[d] - 1));
    }
    const OpClass c = ClassifyStack(frames);
    p.by_class[static_cast<int>(c)] += weight_[i];
    if (c != OpClass::kOther) continue;
    std::string name = "(unknown)";
    for (const StackFrame& f : frames) {
      if (!f.function.empty()) {
        name = StripSignature(f.function);
        break;
      }
    }
    other[name] += weight_[i];
  }
  p.other_top.assign(other.begin(), other.end());
  std::sort(p.other_top.begin(), p.other_top.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  if (p.other_top.size() > 5) p.other_top.resize(5);
  return p;
}

}  // namespace jobs
}  // namespace mt
